package cudaext

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBrickMinRowsFromEnv checks the parsing of EnvBrickMinRows.
func TestBrickMinRowsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		value string
		set   bool
		want  int
		bad   bool
	}{
		{set: false, want: brickMinRows},
		{value: "", set: true, want: brickMinRows},
		{value: "0", set: true, want: 0},
		{value: "262144", set: true, want: 262144},
		{value: "-1", set: true, bad: true},
		{value: "1e6", set: true, bad: true},
	} {
		t.Run(fmt.Sprintf("%v=%q", tc.set, tc.value), func(t *testing.T) {
			setEnv(t, EnvBrickMinRows, tc.value, tc.set)
			got, err := brickMinRowsFromEnv()
			if tc.bad {
				require.ErrorContains(t, err, EnvBrickMinRows)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestSpecializedGathersFromEnv checks the parsing of EnvSpecializedGathers.
func TestSpecializedGathersFromEnv(t *testing.T) {
	for _, tc := range []struct {
		value string
		set   bool
		want  bool
		bad   bool
	}{
		{set: false, want: true},
		{value: "", set: true, want: true},
		{value: "1", set: true, want: true},
		{value: "0", set: true, want: false},
		{value: "yes", set: true, bad: true},
		{value: "2", set: true, bad: true},
	} {
		t.Run(fmt.Sprintf("%v=%q", tc.set, tc.value), func(t *testing.T) {
			setEnv(t, EnvSpecializedGathers, tc.value, tc.set)
			got, err := specializedGathersFromEnv()
			if tc.bad {
				require.ErrorContains(t, err, EnvSpecializedGathers)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// setEnv sets environment variable key to value for the test, or, when
// set is false, unsets it for the test (restored afterwards either way).
func setEnv(t *testing.T, key, value string, set bool) {
	t.Helper()
	t.Setenv(key, value)
	if !set {
		require.NoError(t, os.Unsetenv(key))
	}
}
