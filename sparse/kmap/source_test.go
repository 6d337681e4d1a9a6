package kmap

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// fakeSource serves the tables of ref, counting the calls; it fails while
// fail is set and returns a short Nbr while short is set.
type fakeSource struct {
	ref         *Map
	calls       atomic.Int32
	fail, short atomic.Bool
	asked       []string // the tables the last call was asked for
}

var errFake = errors.New("fake source: device gone")

func (s *fakeSource) HostTables(m *Map) (Tables, error) {
	s.calls.Add(1)
	s.asked = s.asked[:0]
	for _, f := range []struct {
		name string
		have []int32
		n    int
	}{{"in", m.InCoords, 4 * m.NIn}, {"out", m.OutCoords, 4 * m.NOut}, {"nbr", m.Nbr, m.NOut * m.V()}} {
		if f.have == nil && f.n > 0 {
			s.asked = append(s.asked, f.name)
		}
	}
	if s.fail.Load() {
		return Tables{}, errFake
	}
	t := Tables{InCoords: slices.Clone(s.ref.InCoords), OutCoords: slices.Clone(s.ref.OutCoords), Nbr: slices.Clone(s.ref.Nbr)}
	if s.short.Load() {
		t.Nbr = t.Nbr[:len(t.Nbr)-1]
	}
	return t, nil
}

// lazyOf returns a map with ref's header and a source serving its tables;
// keepIn keeps ref's InCoords on the host (as engines do for host
// coordinates).
func lazyOf(ref *Map, keepIn bool) (*Map, *fakeSource) {
	src := &fakeSource{ref: ref}
	m := &Map{Kind: ref.Kind, Conv: ref.Conv, In: ref.In, Out: ref.Out, NIn: ref.NIn, NOut: ref.NOut, Source: src}
	if keepIn {
		m.InCoords = ref.InCoords
	}
	return m, src
}

func strided(t *testing.T) *Map {
	t.Helper()
	ref, err := NewStrided(shellCoords(24, 2), grid.Extent{Batch: 2, X: 24, Y: 24, Z: 24}, grid.Cube(2, 2, 0, 1), nil)
	require.NoError(t, err)
	require.Positive(t, ref.NOut)
	return ref
}

// TestLoadOnFirstHostUse: every host consumer of a map with a Source
// loads it on first use, exactly once, and sees the source's tables.
func TestLoadOnFirstHostUse(t *testing.T) {
	ref := strided(t)
	uses := []struct {
		name string
		use  func(m *Map) any
		want any
	}{
		{"Load", func(m *Map) any { return m.Load() }, error(nil)},
		{"Validate", func(m *Map) any { return m.Validate() }, error(nil)},
		{"Reverse", func(m *Map) any { return m.Reverse() }, ref.Reverse()},
		{"Pairs", func(m *Map) any { return m.Pairs() }, ref.Pairs()},
		{"Masked", func(m *Map) any { return m.Masked().Order }, ref.Masked().Order},
		{"ReverseMasked", func(m *Map) any { return m.ReverseMasked().Order }, ref.ReverseMasked().Order},
		{"Stats", func(m *Map) any { return m.Stats(64) }, ref.Stats(64)},
	}
	for _, u := range uses {
		for _, keepIn := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/keepIn=%v", u.name, keepIn), func(t *testing.T) {
				m, src := lazyOf(ref, keepIn)
				require.False(t, m.Loaded())
				require.Nil(t, m.Nbr)
				require.Nil(t, m.OutCoords)
				require.Equal(t, u.want, u.use(m))
				require.Equal(t, int32(1), src.calls.Load())
				if keepIn {
					require.Equal(t, []string{"out", "nbr"}, src.asked)
					require.Same(t, &ref.InCoords[0], &m.InCoords[0], "a table the host has is kept")
				} else {
					require.Equal(t, []string{"in", "out", "nbr"}, src.asked)
				}
				require.True(t, m.Loaded())
				require.Equal(t, ref.InCoords, m.InCoords)
				require.Equal(t, ref.OutCoords, m.OutCoords)
				require.Equal(t, ref.Nbr, m.Nbr)
				// Later uses load nothing.
				require.NoError(t, m.Load())
				require.Equal(t, ref.Reverse(), m.Reverse())
				require.Equal(t, int32(1), src.calls.Load())
			})
		}
	}
}

// TestLoadConcurrent: many goroutines using a fresh map at once cause one
// load, and all see the same tables (run with -race).
func TestLoadConcurrent(t *testing.T) {
	ref := strided(t)
	for round := range 20 {
		m, src := lazyOf(ref, round%2 == 0)
		var wg sync.WaitGroup
		errs := make([]error, 16)
		nbrs := make([][]int32, 16)
		for g := range 16 {
			wg.Go(func() {
				switch g % 4 {
				case 0:
					errs[g] = m.Load()
				case 1:
					errs[g] = m.Validate()
				case 2:
					_ = m.Pairs()
				case 3:
					_ = m.Reverse()
				}
				if errs[g] == nil {
					nbrs[g] = m.Nbr // safe: Load (inside every call) returned
				}
			})
		}
		wg.Wait()
		require.Equal(t, int32(1), src.calls.Load(), "round %d", round)
		for g := range 16 {
			require.NoError(t, errs[g])
			require.Equal(t, ref.Nbr, nbrs[g])
		}
	}
}

// TestLoadErrors: a failing or inconsistent source changes nothing and is
// asked again; accessors without an error result panic with its error.
func TestLoadErrors(t *testing.T) {
	ref := strided(t)
	m, src := lazyOf(ref, false)
	src.fail.Store(true)
	err := m.Load()
	require.ErrorIs(t, err, errFake)
	require.ErrorContains(t, err, "loading the host tables of a strided map")
	require.ErrorIs(t, m.Validate(), errFake)
	require.PanicsWithError(t, "kmap: Map.Reverse: kmap: loading the host tables of a strided map: fake source: device gone (call Map.Load first to handle this error)",
		func() { m.Reverse() })
	require.Panics(t, func() { m.Pairs() })
	require.Panics(t, func() { m.Stats(0) })
	require.False(t, m.Loaded())
	require.Nil(t, m.Nbr)
	require.Nil(t, m.InCoords)
	require.Equal(t, int32(5), src.calls.Load(), "every use retries")

	src.fail.Store(false)
	src.short.Store(true)
	err = m.Load()
	require.ErrorIs(t, err, ErrMap)
	require.ErrorContains(t, err, fmt.Sprintf("returned %d Nbr entries, want %d", len(ref.Nbr)-1, len(ref.Nbr)))
	require.False(t, m.Loaded())
	require.Nil(t, m.Nbr)
	require.Nil(t, m.OutCoords, "nothing is filled when one table is wrong")

	src.short.Store(false)
	require.NoError(t, m.Load())
	require.Equal(t, int32(7), src.calls.Load())
	require.Equal(t, ref.Nbr, m.Nbr)
	checkDerived(t, m)

	var nilMap *Map
	require.ErrorIs(t, nilMap.Load(), ErrMap)
}

// TestLoadWithoutSource: builder maps and empty maps are loaded from the
// start and never call anything.
func TestLoadWithoutSource(t *testing.T) {
	ref := strided(t)
	require.True(t, ref.Loaded())
	require.NoError(t, ref.Load())
	empty := &Map{Kind: Submanifold, Conv: grid.Submanifold(cube3(3), cube3(1)), Source: &fakeSource{ref: ref}}
	empty.Source.(*fakeSource).fail.Store(true)
	require.False(t, empty.Loaded())
	// Nothing to fetch: the source is still asked once (it may need to
	// check its own state) and its error reported.
	require.ErrorIs(t, empty.Load(), errFake)
	empty.Source.(*fakeSource).fail.Store(false)
	require.NoError(t, empty.Load())
	require.True(t, empty.Loaded())
	require.Empty(t, empty.Source.(*fakeSource).asked)
	require.Nil(t, empty.Nbr)
	require.Empty(t, empty.Reverse())
}
