package synth

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/stretchr/testify/require"
)

// The voxel and pair counts of FlexGEMM's sphere_coords, from
// shared/reference/FLEXGEMM.md §5.1 (which reproduces O-CNN's published
// counts).
var shellCounts = []struct {
	res, n int
	pairs  int64
}{
	{8, 192, 2544},
	{16, 848, 10544},
	{32, 3840, 50304},
	{64, 15192, 191208},
	{128, 64160, 831680},
	{256, 252392, 3203048},
}

func TestSphereShellCounts(t *testing.T) {
	for _, tc := range shellCounts {
		t.Run(fmt.Sprint(tc.res), func(t *testing.T) {
			if tc.res > 128 && testing.Short() {
				t.Skip("large shell in -short mode")
			}
			coords, ext := SphereShell(tc.res, 1)
			require.Equal(t, grid.Extent{Batch: 1, X: tc.res, Y: tc.res, Z: tc.res}, ext)
			require.Len(t, coords, 4*tc.n)
			m, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
			require.NoError(t, err)
			require.Equal(t, tc.pairs, m.Pairs().Count())
		})
	}
}

func TestSphereShellBatch(t *testing.T) {
	one, _ := SphereShell(16, 1)
	three, ext := SphereShell(16, 3)
	require.Equal(t, 3, ext.Batch)
	n := len(one) / 4
	require.Len(t, three, 3*len(one))
	for b := range 3 {
		for r := range n {
			require.Equal(t, int32(b), three[4*(b*n+r)])
			require.Equal(t, one[4*r+1:4*r+4], three[4*(b*n+r)+1:4*(b*n+r)+4])
		}
	}
	// Every voxel is inside the grid and rows are sorted and unique.
	for r := 1; r < len(three)/4; r++ {
		a := ext.Key(int(three[4*r-4]), int(three[4*r-3]), int(three[4*r-2]), int(three[4*r-1]))
		c := ext.Key(int(three[4*r]), int(three[4*r+1]), int(three[4*r+2]), int(three[4*r+3]))
		require.Less(t, a, c)
	}
}

func TestSphereShellTiny(t *testing.T) {
	// res 1 and 2: every voxel centre lies within res/2 of the centre and
	// the inner radius is negative, so the whole grid is active.
	c, _ := SphereShell(1, 1)
	require.Equal(t, []int32{0, 0, 0, 0}, c)
	c, _ = SphereShell(2, 1)
	require.Len(t, c, 4*8)
	require.Panics(t, func() { SphereShell(0, 1) })
	require.Panics(t, func() { SphereShell(4, 0) })
}

func TestRandomScene(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 5, Y: 6, Z: 7}
	for _, d := range []float64{0, 0.1, 0.5, 1, 2} {
		c := RandomScene(rand.New(rand.NewPCG(1, 2)), ext, d)
		n := len(c) / 4
		switch {
		case d <= 0:
			require.Zero(t, n)
		case d >= 1:
			require.Equal(t, int(ext.Sites()), n)
		default:
			require.InDelta(t, d*float64(ext.Sites()), float64(n), 4*sqrtf(float64(ext.Sites())))
		}
		for r := range n {
			require.True(t, ext.Contains(int(c[4*r]), int(c[4*r+1]), int(c[4*r+2]), int(c[4*r+3])))
			if r > 0 {
				require.Less(t, ext.Key(int(c[4*r-4]), int(c[4*r-3]), int(c[4*r-2]), int(c[4*r-1])),
					ext.Key(int(c[4*r]), int(c[4*r+1]), int(c[4*r+2]), int(c[4*r+3])))
			}
		}
	}
	// Large grids sample distinct sites.
	big := grid.Extent{Batch: 1, X: 1024, Y: 1024, Z: 1024}
	c := RandomScene(rand.New(rand.NewPCG(3, 4)), big, 1e-5)
	require.Equal(t, 4*10737, len(c)) // round(1e-5 · 2^30)
	// The same seed gives the same scene.
	require.Equal(t, RandomScene(rand.New(rand.NewPCG(5, 6)), ext, 0.3), RandomScene(rand.New(rand.NewPCG(5, 6)), ext, 0.3))
}

func sqrtf(x float64) float64 {
	r := 1.0
	for range 50 {
		r = (r + x/r) / 2
	}
	return r
}

func TestRandomValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	u := Uniform[float32](rng, 1000)
	for _, v := range u {
		require.True(t, v >= -1 && v < 1)
	}
	require.Len(t, Normal[float64](rng, 10), 10)
	require.Len(t, Features[float64](rng, 3, 4), 12)
	w := Weights[float64](rng, 2, 27, 4)
	require.Len(t, w, 2*27*4)
	for _, v := range w {
		require.LessOrEqual(t, v*v, 1.0/(27*4))
	}
	require.Empty(t, Weights[float32](rng, 2, 27, 0))
}

func TestTapMasks(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ rows, taps, pool int }{{0, 27, 0}, {500, 27, 0}, {500, 3, 0}, {2000, 64, 7}, {300, 40, 1}} {
		m := TapMasks(rng, c.rows, c.taps, c.pool)
		require.Len(t, m, c.rows)
		distinct := map[uint64]bool{}
		for _, x := range m {
			if c.taps < 64 {
				require.Zero(t, x>>c.taps, "%+v: a bit past the taps", c)
			}
			distinct[x] = true
		}
		if c.pool > 0 {
			require.LessOrEqual(t, len(distinct), c.pool, "%+v", c)
		} else if c.rows > 0 && c.taps >= 27 {
			require.Greater(t, len(distinct), c.rows*9/10, "%+v: independent masks", c)
		}
	}
	require.Panics(t, func() { TapMasks(rng, 1, 65, 0) })
	a := TapMasks(rand.New(rand.NewPCG(1, 1)), 50, 27, 5)
	b := TapMasks(rand.New(rand.NewPCG(1, 1)), 50, 27, 5)
	require.Equal(t, a, b, "deterministic")
}

func ExampleSphereShell() {
	coords, ext := SphereShell(64, 2)
	fmt.Println(len(coords)/4, ext)
	// Output: 30384 Extent{Batch:2 X:64 Y:64 Z:64}
}
