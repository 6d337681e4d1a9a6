package grid

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestExtentValidate(t *testing.T) {
	for _, tc := range []struct {
		ext  Extent
		want error
	}{
		{Extent{1, 1, 1, 1}, nil},
		{Extent{4, 1024, 1024, 1024}, nil},
		{Extent{0, 1, 1, 1}, ErrBadExtent},
		{Extent{1, -3, 1, 1}, ErrBadExtent},
		{Extent{1 << 20, 1 << 20, 1 << 20, 1 << 20}, ErrBadExtent}, // 2^80 sites
	} {
		err := tc.ext.Validate()
		if tc.want == nil {
			require.NoError(t, err, tc.ext)
		} else {
			require.ErrorIs(t, err, tc.want, tc.ext)
		}
	}
}

func TestKeyRoundTrip(t *testing.T) {
	for _, ext := range []Extent{{1, 1, 1, 1}, {3, 5, 7, 2}, {2, 64, 1, 9}} {
		seen := map[uint64]bool{}
		for b := range ext.Batch {
			for x := range ext.X {
				for y := range ext.Y {
					for z := range ext.Z {
						k := ext.Key(b, x, y, z)
						require.Less(t, k, ext.Sites())
						require.False(t, seen[k], "key %d repeated", k)
						seen[k] = true
						bb, xx, yy, zz := ext.Unkey(k)
						require.Equal(t, [4]int{b, x, y, z}, [4]int{bb, xx, yy, zz})
					}
				}
			}
		}
		require.Len(t, seen, int(ext.Sites()))
	}
	big := Extent{Batch: 3, X: 1 << 21, Y: 1 << 21, Z: 1 << 20}
	b, x, y, z := big.Unkey(big.Key(2, 1<<21-1, 5, 1<<20-1))
	require.Equal(t, [4]int{2, 1<<21 - 1, 5, 1<<20 - 1}, [4]int{b, x, y, z})
}

func TestKeyBits(t *testing.T) {
	require.Equal(t, 32, Extent{1, 1024, 1024, 1024}.KeyBits())
	// 2^32 sites would use key 2^32−1, the empty-slot sentinel of 32-bit tables.
	require.Equal(t, 64, Extent{4, 1024, 1024, 1024}.KeyBits())
	require.Equal(t, 32, Extent{1, 1, 1, math.MaxUint32}.KeyBits())
	require.Equal(t, 64, Extent{5, 1024, 1024, 1024}.KeyBits())
}

func TestTapIndexRoundTrip(t *testing.T) {
	c := Conv{Kernel: [3]int{2, 3, 5}}
	for v := range c.Volume() {
		k := c.Tap(v)
		require.Equal(t, v, c.TapIndex(k))
		require.Equal(t, v, (k[0]*3+k[1])*5+k[2], "taps are x-major")
	}
}

// TestCoarseFloorDivision checks Coarse against the defining relation
// fine = coarse·S − P + k·D for negative and positive values: the lesson
// of fVDB #668 (truncating division for negative coordinates).
func TestCoarseFloorDivision(t *testing.T) {
	for _, s := range []int{1, 2, 3} {
		for _, p := range []int{0, 1, 2} {
			for _, d := range []int{1, 2, 3} {
				c := Cube(3, s, p, d)
				for fine := -10; fine <= 10; fine++ {
					for k := range 3 {
						q, ok := c.Coarse(0, fine, k)
						found := false
						for qq := -20; qq <= 20; qq++ {
							if c.Fine(0, qq, k) == fine {
								require.True(t, ok, "s%d p%d d%d fine %d k %d", s, p, d, fine, k)
								require.Equal(t, qq, q)
								found = true
							}
						}
						if !found {
							require.False(t, ok, "s%d p%d d%d fine %d k %d gave %d", s, p, d, fine, k, q)
						}
					}
				}
			}
		}
	}
}

func TestExtents(t *testing.T) {
	in := Extent{Batch: 2, X: 8, Y: 7, Z: 5}
	for _, tc := range []struct {
		conv      Conv
		strided   [3]int
		transpose [3]int
	}{
		// torch: (n + 2P − D(K−1) − 1)/S + 1 and (n − 1)S − 2P + D(K−1) + 1.
		{Cube(2, 2, 0, 1), [3]int{4, 3, 2}, [3]int{16, 14, 10}},
		{Cube(3, 1, 1, 1), [3]int{8, 7, 5}, [3]int{8, 7, 5}},
		{Cube(3, 2, 1, 2), [3]int{3, 3, 2}, [3]int{17, 15, 11}},
		{Conv{Kernel: [3]int{1, 3, 5}, Stride: [3]int{1, 2, 3}, Padding: [3]int{0, 1, 2}, Dilation: [3]int{1, 1, 1}}, [3]int{8, 4, 2}, [3]int{8, 13, 13}},
	} {
		t.Run(tc.conv.String(), func(t *testing.T) {
			require.NoError(t, tc.conv.Validate())
			out, err := tc.conv.StridedExtent(in)
			require.NoError(t, err)
			require.Equal(t, tc.strided, out.Spatial())
			require.Equal(t, in.Batch, out.Batch)
			tr, err := tc.conv.TransposedExtent(in)
			require.NoError(t, err)
			require.Equal(t, tc.transpose, tr.Spatial())
		})
	}
	_, err := Cube(5, 1, 0, 3).StridedExtent(in)
	require.ErrorIs(t, err, ErrBadGeometry)
	_, err = Cube(1, 1, 3, 1).TransposedExtent(Extent{1, 2, 2, 2})
	require.ErrorIs(t, err, ErrBadGeometry)
}

func TestConvValidate(t *testing.T) {
	ok := Cube(3, 1, 1, 1)
	require.NoError(t, ok.Validate())
	require.NoError(t, ok.ValidateSubmanifold())
	for _, bad := range []Conv{
		Cube(0, 1, 0, 1), Cube(3, 0, 0, 1), Cube(3, 1, -1, 1), Cube(3, 1, 0, 0),
		Cube(math.MaxInt32, 1, 0, 1),
	} {
		require.ErrorIs(t, bad.Validate(), ErrBadGeometry, bad)
	}
	for _, bad := range []Conv{
		Submanifold([3]int{2, 3, 3}, [3]int{1, 1, 1}), // even kernel
		Cube(3, 2, 1, 1), // stride 2
		Cube(3, 1, 0, 1), // padding 0
	} {
		err := bad.ValidateSubmanifold()
		require.ErrorIs(t, err, ErrBadGeometry, bad)
		require.False(t, errors.Is(err, ErrBadExtent))
	}
	require.NoError(t, Submanifold([3]int{5, 1, 3}, [3]int{2, 1, 3}).ValidateSubmanifold())
}

func ExampleConv_StridedExtent() {
	out, _ := Cube(2, 2, 0, 1).StridedExtent(Extent{Batch: 1, X: 64, Y: 64, Z: 63})
	fmt.Println(out)
	// Output: Extent{Batch:1 X:32 Y:32 Z:31}
}
