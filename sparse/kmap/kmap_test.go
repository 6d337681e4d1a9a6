package kmap

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

func cube3(k int) [3]int { return [3]int{k, k, k} }

// checkMap verifies the invariants every map must satisfy.
func checkMap(t *testing.T, m *Map) {
	t.Helper()
	require.NoError(t, m.Validate())
	checkDerived(t, m)
}

func TestSubmanifoldMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	type tc struct {
		name   string
		ext    grid.Extent
		frac   float64
		kernel [3]int
		dil    [3]int
	}
	var cases []tc
	for _, k := range []int{1, 3, 5} {
		for _, d := range []int{1, 2, 3} {
			cases = append(cases, tc{fmt.Sprintf("K%d_D%d", k, d), grid.Extent{Batch: 2, X: 7, Y: 6, Z: 5}, 0.3, cube3(k), cube3(d)})
		}
	}
	cases = append(cases,
		tc{"aniso_135", grid.Extent{Batch: 3, X: 6, Y: 7, Z: 8}, 0.4, [3]int{1, 3, 5}, [3]int{2, 1, 1}},
		tc{"aniso_531", grid.Extent{Batch: 1, X: 9, Y: 5, Z: 4}, 0.5, [3]int{5, 3, 1}, [3]int{1, 3, 2}},
		tc{"V45_two_words_no", grid.Extent{Batch: 2, X: 6, Y: 6, Z: 6}, 0.5, [3]int{3, 3, 5}, [3]int{1, 1, 1}},
		tc{"V125", grid.Extent{Batch: 2, X: 6, Y: 6, Z: 6}, 0.6, cube3(5), cube3(1)},
		tc{"V343_dense", grid.Extent{Batch: 1, X: 5, Y: 5, Z: 5}, 1, cube3(7), cube3(1)},
		tc{"dense", grid.Extent{Batch: 2, X: 4, Y: 4, Z: 4}, 1, cube3(3), cube3(1)},
		tc{"single_voxel", grid.Extent{Batch: 1, X: 1, Y: 1, Z: 1}, 1, cube3(3), cube3(1)},
		tc{"thin_axes", grid.Extent{Batch: 2, X: 1, Y: 9, Z: 2}, 0.7, cube3(3), cube3(2)},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			coords := randCoords(rng, c.ext, c.frac)
			m, err := NewSubmanifold(coords, c.ext, c.kernel, c.dil)
			require.NoError(t, err)
			require.Equal(t, Submanifold, m.Kind)
			require.Equal(t, len(coords)/4, m.NIn)
			require.Equal(t, m.NIn, m.NOut)
			require.Equal(t, c.ext, m.In)
			require.Equal(t, c.ext, m.Out)
			require.Equal(t, coords, m.InCoords)
			require.Equal(t, coords, m.OutCoords)
			require.Equal(t, bruteSubmanifold(coords, c.ext, c.kernel, c.dil), m.Nbr)
			// The centre tap is the row itself.
			V := m.V()
			for o := range m.NOut {
				require.Equal(t, int32(o), m.Nbr[o*V+V/2])
			}
			checkMap(t, m)
		})
	}
}

// geometries returns every isotropic geometry with kernel 1–5, stride 1–3,
// padding 0–2 and dilation 1–3 (a sample of them under -short), plus
// random anisotropic ones.
func geometries(rng *rand.Rand) []grid.Conv {
	var out []grid.Conv
	for k := 1; k <= 5; k++ {
		for s := 1; s <= 3; s++ {
			for p := 0; p <= 2; p++ {
				for d := 1; d <= 3; d++ {
					if testing.Short() && (k+s+p+d)%3 != 0 {
						continue
					}
					out = append(out, grid.Cube(k, s, p, d))
				}
			}
		}
	}
	for range 24 {
		var c grid.Conv
		for a := range 3 {
			c.Kernel[a] = 1 + rng.IntN(5)
			c.Stride[a] = 1 + rng.IntN(3)
			c.Padding[a] = rng.IntN(3)
			c.Dilation[a] = 1 + rng.IntN(3)
		}
		out = append(out, c)
	}
	return out
}

func TestStridedInverseTransposedMatchBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, conv := range geometries(rng) {
		t.Run(conv.String(), func(t *testing.T) { checkGeometry(t, rng, conv) })
	}
}

// TestUnplannedAxes repeats a sample of the geometries with the per-axis
// tap tables disabled, as for huge extents.
func TestUnplannedAxes(t *testing.T) {
	saved := maxPlan
	maxPlan = 0
	defer func() { maxPlan = saved }()
	rng := rand.New(rand.NewPCG(30, 40))
	for i, conv := range geometries(rng) {
		if i%7 == 0 {
			t.Run(conv.String(), func(t *testing.T) { checkGeometry(t, rng, conv) })
		}
	}
	coords := randCoords(rng, grid.Extent{Batch: 2, X: 6, Y: 6, Z: 6}, 0.4)
	m, err := NewSubmanifold(coords, grid.Extent{Batch: 2, X: 6, Y: 6, Z: 6}, cube3(3), cube3(2))
	require.NoError(t, err)
	require.Equal(t, bruteSubmanifold(coords, grid.Extent{Batch: 2, X: 6, Y: 6, Z: 6}, cube3(3), cube3(2)), m.Nbr)
}

// checkGeometry compares strided (generated and given outputs), inverse
// and transposed maps of random coordinates with the brute force.
func checkGeometry(t *testing.T, rng *rand.Rand, conv grid.Conv) {
	ext := grid.Extent{Batch: 2, X: 5 + rng.IntN(4), Y: 4 + rng.IntN(4), Z: 3 + rng.IntN(5)}
	coords := randCoords(rng, ext, 0.25)

	// Strided with generated outputs.
	wantOut, wantOC, wantNbr, ok := bruteStrided(coords, ext, conv, nil)
	s, err := NewStrided(coords, ext, conv, nil)
	if !ok {
		require.ErrorIs(t, err, grid.ErrBadGeometry)
	} else {
		require.NoError(t, err)
		require.Equal(t, Strided, s.Kind)
		require.Equal(t, ext, s.In)
		require.Equal(t, wantOut, s.Out)
		require.Equal(t, len(coords)/4, s.NIn)
		require.Equal(t, coords, s.InCoords)
		require.Equal(t, wantOC, s.OutCoords)
		require.Equal(t, len(wantOC)/4, s.NOut)
		require.Equal(t, wantNbr, s.Nbr)
		checkMap(t, s)

		// Inverse: back to exactly the strided inputs.
		inv, err := NewInverse(s)
		require.NoError(t, err)
		require.Equal(t, Inverse, inv.Kind)
		require.Equal(t, s.Out, inv.In)
		require.Equal(t, s.In, inv.Out)
		require.Equal(t, s.NOut, inv.NIn)
		require.Equal(t, s.NIn, inv.NOut)
		require.Equal(t, coords, inv.OutCoords)
		require.Equal(t, s.OutCoords, inv.InCoords)
		require.Equal(t, bruteInverse(coords, ext, conv, s.Out, s.OutCoords), inv.Nbr)
		require.Equal(t, s.Nbr, inv.Reverse())
		checkMap(t, inv)

		// Strided with user-given outputs: a random subset of the
		// output grid in random order, reached or not.
		given := randCoords(rng, s.Out, 0.3)
		_, _, wantNbr, _ := bruteStrided(coords, ext, conv, given)
		g, err := NewStrided(coords, ext, conv, given)
		require.NoError(t, err)
		require.Equal(t, given, g.OutCoords)
		require.Equal(t, wantNbr, g.Nbr)
		checkMap(t, g)
	}

	// Transposed from the same coordinates.
	wantOut, wantOC, wantNbr, ok = bruteTransposed(coords, ext, conv)
	tr, err := NewTransposed(coords, ext, conv)
	if !ok {
		require.ErrorIs(t, err, grid.ErrBadGeometry)
		return
	}
	require.NoError(t, err)
	require.Equal(t, Transposed, tr.Kind)
	require.Equal(t, ext, tr.In)
	require.Equal(t, wantOut, tr.Out)
	require.Equal(t, coords, tr.InCoords)
	require.Equal(t, wantOC, tr.OutCoords)
	require.Equal(t, wantNbr, tr.Nbr)
	checkMap(t, tr)
}

// TestInverseKeepsUnreachedInputs is the case where padding and stride
// leave some strided inputs out of every window: the inverse map must still
// output them, at their own coordinates, with no neighbours.
func TestInverseKeepsUnreachedInputs(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 5, Y: 1, Z: 1}
	// K=1, S=2: only even x are read. Rows 1 and 3 (odd x) are unreached.
	coords := []int32{1, 4, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0}
	conv := grid.Conv{Kernel: [3]int{1, 1, 1}, Stride: [3]int{2, 1, 1}, Dilation: [3]int{1, 1, 1}}
	s, err := NewStrided(coords, ext, conv, nil)
	require.NoError(t, err)
	require.Equal(t, []int32{0, 0, 0, 0, 1, 2, 0, 0}, s.OutCoords)
	require.Equal(t, []int32{2, 0}, s.Nbr)
	inv, err := NewInverse(s)
	require.NoError(t, err)
	require.Equal(t, coords, inv.OutCoords)
	require.Equal(t, []int32{1, -1, 0, -1}, inv.Nbr)
	require.Equal(t, []int32{2, 0}, inv.Reverse())
	checkMap(t, inv)
}

func TestEmptyAndTiny(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	conv := grid.Cube(3, 2, 1, 1)
	for _, coords := range [][]int32{nil, {}} {
		sm, err := NewSubmanifold(coords, ext, cube3(3), cube3(1))
		require.NoError(t, err)
		require.Zero(t, sm.NOut)
		require.Empty(t, sm.Nbr)
		s, err := NewStrided(coords, ext, conv, nil)
		require.NoError(t, err)
		require.Zero(t, s.NOut)
		require.Empty(t, s.OutCoords)
		inv, err := NewInverse(s)
		require.NoError(t, err)
		require.Zero(t, inv.NOut)
		tr, err := NewTransposed(coords, ext, conv)
		require.NoError(t, err)
		require.Zero(t, tr.NOut)
		for _, m := range []*Map{sm, s, inv, tr} {
			checkMap(t, m)
			require.Empty(t, m.Reverse())
			require.Zero(t, m.Pairs().Count())
			require.Empty(t, m.Masked().Order)
			require.Empty(t, m.Masked().Tiles(32).Taps)
			require.Equal(t, []int32{0}, m.Masked().Tiles(32).Seg)
			require.Zero(t, m.Stats(32).Pairs)
		}
	}
	// A given empty output list is honoured (no generated outputs).
	s, err := NewStrided([]int32{0, 1, 1, 1}, ext, conv, []int32{})
	require.NoError(t, err)
	require.Zero(t, s.NOut)

	// A single voxel in the corner of a 1×1×1 grid.
	one := []int32{0, 0, 0, 0}
	unit := grid.Extent{Batch: 1, X: 1, Y: 1, Z: 1}
	sm, err := NewSubmanifold(one, unit, cube3(3), cube3(1))
	require.NoError(t, err)
	want := slices.Repeat([]int32{-1}, 27)
	want[13] = 0
	require.Equal(t, want, sm.Nbr)
	s, err = NewStrided(one, unit, grid.Cube(2, 2, 1, 1), nil)
	require.NoError(t, err)
	require.Equal(t, grid.Extent{Batch: 1, X: 1, Y: 1, Z: 1}, s.Out)
	require.Equal(t, one, s.OutCoords)
	require.Equal(t, []int32{-1, -1, -1, -1, -1, -1, -1, 0}, s.Nbr)
}

func TestBuilderErrors(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 4, Y: 5, Z: 6}
	ok := []int32{0, 0, 0, 0, 1, 3, 4, 5}
	cube := grid.Cube(3, 2, 1, 1)
	cases := []struct {
		name  string
		build func() (*Map, error)
		want  error
		msg   string
	}{
		{"length", func() (*Map, error) { return NewSubmanifold(ok[:7], ext, cube3(3), cube3(1)) }, ErrCoords, "length 7"},
		{"x too large", func() (*Map, error) {
			return NewSubmanifold([]int32{0, 0, 0, 0, 1, 4, 0, 0}, ext, cube3(3), cube3(1))
		}, ErrOutOfRange, "row 1 (1, 4, 0, 0)"},
		{"negative z", func() (*Map, error) {
			return NewStrided([]int32{0, 0, 0, -1}, ext, cube, nil)
		}, ErrOutOfRange, "row 0 (0, 0, 0, -1)"},
		{"batch too large", func() (*Map, error) {
			return NewTransposed([]int32{2, 0, 0, 0}, ext, cube)
		}, ErrOutOfRange, "row 0 (2, 0, 0, 0)"},
		{"negative batch", func() (*Map, error) {
			return NewTransposed([]int32{-1, 0, 0, 0}, ext, cube)
		}, ErrOutOfRange, "row 0"},
		{"duplicate", func() (*Map, error) {
			return NewSubmanifold([]int32{0, 1, 1, 1, 1, 2, 2, 2, 0, 1, 1, 1, 1, 2, 2, 2, 0, 1, 1, 1}, ext, cube3(3), cube3(1))
		}, ErrDuplicate, "rows 0 and 2 are both (0, 1, 1, 1)"},
		{"duplicate sorted", func() (*Map, error) {
			return NewStrided([]int32{0, 1, 1, 1, 0, 1, 1, 1}, ext, cube, nil)
		}, ErrDuplicate, "rows 0 and 1"},
		{"even submanifold kernel", func() (*Map, error) { return NewSubmanifold(ok, ext, [3]int{3, 2, 3}, cube3(1)) }, grid.ErrBadGeometry, "odd"},
		{"zero dilation", func() (*Map, error) { return NewSubmanifold(ok, ext, cube3(3), [3]int{1, 0, 1}) }, grid.ErrBadGeometry, "dilation"},
		{"zero stride", func() (*Map, error) { return NewStrided(ok, ext, grid.Cube(3, 0, 1, 1), nil) }, grid.ErrBadGeometry, "stride"},
		{"negative padding", func() (*Map, error) { return NewTransposed(ok, ext, grid.Cube(3, 1, -1, 1)) }, grid.ErrBadGeometry, "padding"},
		{"zero kernel", func() (*Map, error) { return NewTransposed(ok, ext, grid.Cube(0, 1, 0, 1)) }, grid.ErrBadGeometry, "kernel"},
		{"strided window too large", func() (*Map, error) { return NewStrided(ok, ext, grid.Cube(5, 1, 0, 1), nil) }, grid.ErrBadGeometry, "does not fit"},
		{"transposed empty", func() (*Map, error) { return NewTransposed(ok, ext, grid.Cube(1, 1, 3, 1)) }, grid.ErrBadGeometry, "empty"},
		{"bad extent", func() (*Map, error) {
			return NewSubmanifold(nil, grid.Extent{Batch: 1, X: 0, Y: 1, Z: 1}, cube3(3), cube3(1))
		}, grid.ErrBadExtent, "non-positive"},
		{"extent beyond int32", func() (*Map, error) {
			return NewSubmanifold(ok, grid.Extent{Batch: 1, X: 1 << 32, Y: 2, Z: 2}, cube3(3), cube3(1))
		}, ErrTooLarge, "beyond int32"},
		{"transposed grid beyond int32", func() (*Map, error) {
			return NewTransposed(ok, ext, grid.Conv{Kernel: cube3(1), Stride: [3]int{1 << 30, 1, 1}, Dilation: cube3(1)})
		}, ErrTooLarge, "output grid"},
		{"transposed grid beyond uint64", func() (*Map, error) {
			return NewTransposed(ok, ext, grid.Cube(1, 1<<24, 0, 1))
		}, grid.ErrBadExtent, "output grid"},
		{"given out of range", func() (*Map, error) { return NewStrided(ok, ext, cube, []int32{0, 2, 0, 0}) }, ErrOutOfRange, "output coordinates: kmap: coordinate out of range: row 0 (0, 2, 0, 0)"},
		{"given duplicate", func() (*Map, error) {
			return NewStrided(ok, ext, cube, []int32{0, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1})
		}, ErrDuplicate, "output coordinates: kmap: duplicate coordinate: rows 0 and 2"},
		{"given length", func() (*Map, error) { return NewStrided(ok, ext, cube, []int32{0, 1}) }, ErrCoords, "output coordinates"},
		{"inverse of nil", func() (*Map, error) { return NewInverse(nil) }, ErrMap, "nil"},
		{"inverse of submanifold", func() (*Map, error) {
			m, err := NewSubmanifold(ok, ext, cube3(3), cube3(1))
			require.NoError(t, err)
			return NewInverse(m)
		}, ErrMap, "needs a strided map, got a submanifold map"},
		{"inverse of inconsistent", func() (*Map, error) {
			m, err := NewStrided(ok, ext, cube, nil)
			require.NoError(t, err)
			bad := &Map{Kind: Strided, Conv: m.Conv, In: m.In, Out: m.Out, NIn: m.NIn, NOut: m.NOut, InCoords: m.InCoords, OutCoords: m.OutCoords, Nbr: slices.Clone(m.Nbr)}
			bad.Nbr[3] = int32(m.NIn)
			return NewInverse(bad)
		}, ErrMap, "Nbr[0, 3] = 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := c.build()
			require.Nil(t, m)
			require.ErrorIs(t, err, c.want)
			require.ErrorContains(t, err, c.msg)
		})
	}
}

func TestValidate(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	m, err := NewStrided([]int32{0, 1, 1, 1, 0, 2, 2, 2}, ext, grid.Cube(2, 2, 0, 1), nil)
	require.NoError(t, err)
	require.NoError(t, m.Validate())
	var nilMap *Map
	require.ErrorIs(t, nilMap.Validate(), ErrMap)
	short := &Map{Kind: m.Kind, Conv: m.Conv, NIn: m.NIn, NOut: m.NOut, InCoords: m.InCoords, OutCoords: m.OutCoords, Nbr: m.Nbr[1:]}
	require.ErrorIs(t, short.Validate(), ErrMap)
	neg := Map{Kind: m.Kind, Conv: m.Conv, NIn: m.NIn, NOut: m.NOut, InCoords: m.InCoords, OutCoords: m.OutCoords, Nbr: slices.Clone(m.Nbr)}
	neg.Nbr[0] = -2
	require.ErrorContains(t, neg.Validate(), "Nbr[0, 0] = -2")
	badConv := Map{Conv: grid.Conv{}}
	require.ErrorIs(t, badConv.Validate(), grid.ErrBadGeometry)
}

// TestShellCounts checks the sphere-shell generator and the submanifold
// map against FlexGEMM's published voxel and pair counts.
func TestShellCounts(t *testing.T) {
	cases := []struct {
		res, n int
		pairs  int64
	}{
		{8, 192, 2544}, {16, 848, 10544}, {32, 3840, 50304}, {64, 15192, 191208},
	}
	for _, c := range cases {
		coords := shellCoords(c.res, 1)
		require.Len(t, coords, 4*c.n)
		ext := grid.Extent{Batch: 1, X: c.res, Y: c.res, Z: c.res}
		m, err := NewSubmanifold(coords, ext, cube3(3), cube3(1))
		require.NoError(t, err)
		require.Equal(t, c.pairs, m.Stats(0).Pairs)
		require.Equal(t, c.pairs, m.Pairs().Count())
	}
}

// TestDeterministic builds every kind and every derived structure with 1
// and 2 workers on an input large enough for many chunks, in shuffled row
// order, and requires identical results.
func TestDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	coords := shellCoords(64, 3) // 45,576 rows
	n := len(coords) / 4
	rng.Shuffle(n, func(i, j int) {
		for c := range 4 {
			coords[4*i+c], coords[4*j+c] = coords[4*j+c], coords[4*i+c]
		}
	})
	ext := grid.Extent{Batch: 3, X: 64, Y: 64, Z: 64}
	type result struct {
		nbr, rev, order, taps [][]int32
	}
	build := func() result {
		var r result
		sm, err := NewSubmanifold(coords, ext, cube3(3), cube3(1))
		require.NoError(t, err)
		s, err := NewStrided(coords, ext, grid.Cube(3, 2, 1, 1), nil)
		require.NoError(t, err)
		inv, err := NewInverse(s)
		require.NoError(t, err)
		tr, err := NewTransposed(s.OutCoords, s.Out, grid.Cube(2, 2, 0, 1))
		require.NoError(t, err)
		for _, m := range []*Map{sm, s, inv, tr} {
			r.nbr = append(r.nbr, m.Nbr, m.OutCoords)
			r.rev = append(r.rev, m.Reverse(), m.Pairs().In, m.Pairs().Out)
			r.order = append(r.order, m.Masked().Order, m.ReverseMasked().Order)
			r.taps = append(r.taps, m.Masked().Tiles(64).Taps, m.ReverseMasked().Tiles(16).Taps)
		}
		return r
	}
	prev := runtime.GOMAXPROCS(1)
	one := build()
	runtime.GOMAXPROCS(max(2, prev))
	two := build()
	runtime.GOMAXPROCS(prev)
	require.Equal(t, one, two)
}

// TestConcurrentDerived asks for every derived structure from many
// goroutines at once (run with -race).
func TestConcurrentDerived(t *testing.T) {
	coords := shellCoords(32, 2)
	m, err := NewSubmanifold(coords, grid.Extent{Batch: 2, X: 32, Y: 32, Z: 32}, cube3(3), cube3(1))
	require.NoError(t, err)
	var wg sync.WaitGroup
	type derived struct {
		rev            []int32
		pairs          *Pairs
		tiles, revTile *Tiles
	}
	results := make([]derived, 8)
	for g := range results {
		wg.Go(func() {
			results[g] = derived{m.Reverse(), m.Pairs(), m.Masked().Tiles(32), m.ReverseMasked().Tiles(64)}
		})
	}
	wg.Wait()
	for _, r := range results[1:] {
		require.Same(t, &results[0].rev[0], &r.rev[0])
		require.Same(t, results[0].pairs, r.pairs)
		require.Same(t, results[0].tiles, r.tiles)
		require.Same(t, results[0].revTile, r.revTile)
	}
	checkDerived(t, m)
}
