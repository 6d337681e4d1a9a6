package device

import (
	"github.com/flexgemm-go/flexgemm/cudaext"
	"github.com/flexgemm-go/flexgemm/sparse"
)

// RoundTo returns v rounded to the nearest value of dtype dt (ties to
// even), as a float32: the value a device buffer of that dtype stores.
// Float32 and other dtypes return v unchanged. It uses the CUDA engine's
// host conversions (package cudaext's untagged half.go, no cgo), so the
// emulation stores exactly what the engine's uploads store.
func RoundTo(dt sparse.DType, v float32) float32 {
	switch dt {
	case sparse.BFloat16:
		return cudaext.BFloat16BitsToFloat32(cudaext.Float32ToBFloat16Bits(v))
	case sparse.Float16:
		return cudaext.HalfBitsToFloat32(cudaext.Float32ToHalfBits(v))
	}
	return v
}
