package kmap

import "fmt"

// TableSource supplies the host tables of a Map whose tables live
// elsewhere, typically in an engine's device memory (see Map.Source).
type TableSource interface {
	// HostTables returns host copies of the tables m lacks: each of
	// InCoords [NIn·4], OutCoords [NOut·4] and Nbr [NOut·V] that is nil in
	// m although its length would be positive. The fields of the result
	// for tables m already has are ignored. Load calls it with m's load
	// lock held, so it must not call m.Load or a method of m that reads the
	// tables (Validate, Reverse, Pairs, Masked, ReverseMasked, Stats).
	HostTables(m *Map) (Tables, error)
}

// Tables holds the host tables of a map, as returned by a TableSource.
type Tables struct {
	InCoords, OutCoords, Nbr []int32
}

// Load makes m's host tables available. For a map with a Source that is
// not loaded yet it fills each nil InCoords, OutCoords and Nbr (of
// positive length) from Source.HostTables, once. Concurrent callers wait
// for that one load; after Load returns nil the fields can be read
// directly and never change again. A failed load changes nothing, and the
// next call tries again. For a map without a Source Load does nothing.
//
// Validate and the derived accessors (Reverse, Pairs, Masked,
// ReverseMasked, Stats) load on their own; the accessors, which return no
// error, panic if loading fails, so call Load first where the Source can
// fail (a device that was closed, tables that were released).
func (m *Map) Load() error {
	if m == nil {
		return fmt.Errorf("%w: Load of a nil map", ErrMap)
	}
	if m.Loaded() {
		return nil
	}
	dc := &m.derived
	dc.loadMu.Lock()
	defer dc.loadMu.Unlock()
	if dc.loaded.Load() {
		return nil
	}
	fields := [3]struct {
		name string
		dst  *[]int32
		n    int
	}{
		{"InCoords", &m.InCoords, 4 * m.NIn},
		{"OutCoords", &m.OutCoords, 4 * m.NOut},
		{"Nbr", &m.Nbr, m.NOut * m.V()},
	}
	t, err := m.Source.HostTables(m)
	if err != nil {
		return fmt.Errorf("kmap: loading the host tables of a %v map: %w", m.Kind, err)
	}
	got := [3][]int32{t.InCoords, t.OutCoords, t.Nbr}
	for i, f := range fields {
		if *f.dst == nil && f.n > 0 && len(got[i]) != f.n {
			return fmt.Errorf("%w: the table source of a %v map returned %d %s entries, want %d", ErrMap, m.Kind, len(got[i]), f.name, f.n)
		}
	}
	for i, f := range fields {
		if *f.dst == nil && f.n > 0 {
			*f.dst = got[i]
		}
	}
	dc.loaded.Store(true)
	return nil
}

// Loaded reports whether m's host tables are present: always for a map
// without a Source, after a successful Load otherwise. It never loads and
// never blocks.
func (m *Map) Loaded() bool {
	return m.Source == nil || m.derived.loaded.Load()
}

// mustLoad loads m for an accessor that cannot return an error.
func (m *Map) mustLoad(op string) {
	if err := m.Load(); err != nil {
		panic(fmt.Errorf("kmap: Map.%s: %w (call Map.Load first to handle this error)", op, err))
	}
}
