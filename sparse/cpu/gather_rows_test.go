package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// testGather checks gatherRows against a plain loop, with guard elements
// around dst that must stay untouched.
func testGather[T Float](t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, width := range []int{1, 3, 15, 16, 17, 31, 32, 33, 64, 96, 100} {
		for _, extra := range []int{0, 5} {
			srcStride := width + extra
			dstStride := width + (extra+1)/2
			t.Run(fmt.Sprintf("w%d_s%d_d%d", width, srcStride, dstStride), func(t *testing.T) {
				rows := 9
				src := make([]T, rows*srcStride)
				for i := range src {
					src[i] = T(i + 1)
				}
				idx := []int32{3, -1, 0, 8, 8, -1, 5}
				n := len(idx)
				const guard = 7
				dst := make([]T, guard+(n-1)*dstStride+width+guard)
				for i := range dst {
					dst[i] = -T(rng.IntN(100) + 1)
				}
				want := append([]T(nil), dst...)
				off := min(extra, srcStride-width)
				for r, i := range idx {
					for c := range width {
						var v T
						if i >= 0 {
							v = src[int(i)*srcStride+off+c]
						}
						want[guard+r*dstStride+c] = v
					}
				}
				gatherRows(dst[guard:len(dst)-guard], dstStride, src, srcStride, off, idx, width)
				require.Equal(t, want, dst)
			})
		}
	}
}

func TestGatherRows(t *testing.T) {
	testGather[float32](t)
	testGather[float64](t)
}

func TestGatherRowsBounds(t *testing.T) {
	src := make([]float32, 4*8)
	dst := make([]float32, 3*8)
	require.Panics(t, func() { gatherRows(dst, 8, src, 8, 0, []int32{0, 4}, 8) })
	require.Panics(t, func() { gatherRows(dst, 8, src, 8, 1, []int32{0}, 8) })
	require.Panics(t, func() { gatherRows(dst, 8, src, 8, 0, []int32{0, 1, 2, 3}, 8) })
	require.NotPanics(t, func() { gatherRows(dst, 8, src, 8, 0, []int32{0, -1, 3}, 8) })
	// No source rows: only absent rows, which are zeroed.
	dst[0], dst[9] = 1, 2
	gatherRows(dst, 8, nil, 8, 3, []int32{-1, -1}, 4)
	require.Equal(t, float32(0), dst[0])
	require.Equal(t, float32(0), dst[9])
}
