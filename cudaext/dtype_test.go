package cudaext

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
)

// TestFloatSuffix checks the kernel suffix of every dtype: the three float
// dtypes the kernels are instantiated for, none for the others.
func TestFloatSuffix(t *testing.T) {
	for _, tc := range []struct {
		dt   sparse.DType
		want string
		ok   bool
	}{
		{sparse.Float32, "f32", true},
		{sparse.Float16, "f16", true},
		{sparse.BFloat16, "bf16", true},
		{sparse.Float64, "", false},
		{sparse.Int32, "", false},
	} {
		got, ok := floatSuffix(tc.dt)
		require.Equal(t, tc.ok, ok, "%v", tc.dt)
		require.Equal(t, tc.want, got, "%v", tc.dt)
	}
}
