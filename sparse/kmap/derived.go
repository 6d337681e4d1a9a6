package kmap

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
)

// derivedCache holds the lazily built structures of a Map and the state of
// its host tables (Load); the two mutexes are never held together.
type derivedCache struct {
	loadMu  sync.Mutex
	loaded  atomic.Bool // the Source's tables are on the host
	mu      sync.Mutex
	rev     []int32
	haveRev bool
	pairs   *Pairs
	masked  *Masked
	revMask *Masked
}

// Validate reports whether m's fields agree: coordinate and table lengths
// match NIn, NOut and V, and every table entry is −1 or an input row. Maps
// from the builders always pass; the derived structures assume a valid map.
// A map with a Source is loaded first (see Load).
func (m *Map) Validate() error {
	if m == nil {
		return fmt.Errorf("%w: nil map", ErrMap)
	}
	if err := m.Load(); err != nil {
		return err
	}
	if err := m.Conv.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrMap, err)
	}
	V := m.V()
	if m.NIn < 0 || m.NOut < 0 || len(m.InCoords) != 4*m.NIn || len(m.OutCoords) != 4*m.NOut || len(m.Nbr) != m.NOut*V {
		return fmt.Errorf("%w: NIn %d, NOut %d, V %d with %d input coordinates, %d output coordinates and %d table entries",
			ErrMap, m.NIn, m.NOut, V, len(m.InCoords), len(m.OutCoords), len(m.Nbr))
	}
	bad := make([]int, (len(m.Nbr)+grain-1)/grain)
	parallelRows(len(m.Nbr), func(lo, hi int) {
		bad[lo/grain] = -1
		for j := lo; j < hi; j++ {
			if e := m.Nbr[j]; e < -1 || int(e) >= m.NIn {
				bad[lo/grain] = j
				return
			}
		}
	})
	for _, j := range bad {
		if j >= 0 {
			return fmt.Errorf("%w: Nbr[%d, %d] = %d is not −1 or an input row (NIn %d)", ErrMap, j/V, j%V, m.Nbr[j], m.NIn)
		}
	}
	return nil
}

// Reverse returns the [NIn, V] reverse table: Rev[i·V+v] = o where
// Nbr[o·V+v] = i, or −1. Each (i, v) feeds at most one output, so it is well
// defined. It is computed once and cached.
func (m *Map) Reverse() []int32 {
	m.mustLoad("Reverse")
	m.derived.mu.Lock()
	defer m.derived.mu.Unlock()
	if !m.derived.haveRev {
		m.derived.rev = reverseTable(m)
		m.derived.haveRev = true
	}
	return m.derived.rev
}

func reverseTable(m *Map) []int32 {
	V := m.V()
	rev := make([]int32, m.NIn*V)
	if m.Kind == Submanifold {
		// Tap V−1−v is the mirror of tap v around the centre, so
		// Rev[i, v] = Nbr[i, V−1−v]: one sequential pass.
		parallelRows(m.NIn, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				src, dst := m.Nbr[i*V:i*V+V], rev[i*V:i*V+V]
				for v := range dst {
					dst[v] = src[V-1-v]
				}
			}
		})
		return rev
	}
	fill(rev, -1)
	// Every entry of rev has at most one writer, so the scatter can run
	// in parallel without changing the result.
	parallelRows(m.NOut, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			for v, i := range m.Nbr[o*V : o*V+V] {
				if i >= 0 {
					rev[int(i)*V+v] = int32(o)
				}
			}
		}
	})
	return rev
}

// Pairs lists the active (input, output) row pairs of a map grouped by tap:
// the pairs of tap v are In[Seg[v]:Seg[v+1]] and Out[Seg[v]:Seg[v+1]], with
// output rows ascending inside each tap.
type Pairs struct {
	Seg     []int64 // [V+1]
	In, Out []int32 // [Seg[V]]
}

// Count returns the total number of active pairs.
func (p *Pairs) Count() int64 { return p.Seg[len(p.Seg)-1] }

// Pairs returns the per-tap pair lists, computed once and cached.
func (m *Map) Pairs() *Pairs {
	m.mustLoad("Pairs")
	m.derived.mu.Lock()
	defer m.derived.mu.Unlock()
	if m.derived.pairs == nil {
		m.derived.pairs = pairLists(m.Nbr, m.NOut, m.V())
	}
	return m.derived.pairs
}

func pairLists(nbr []int32, nOut, V int) *Pairs {
	nc := (nOut + grain - 1) / grain
	// cnt[c·V+v] counts the pairs of tap v in chunk c, then becomes the
	// chunk's first position in the pair lists.
	cnt := make([]int64, nc*V)
	parallelRows(nOut, func(lo, hi int) {
		cc := cnt[lo/grain*V : lo/grain*V+V]
		for o := lo; o < hi; o++ {
			for v, i := range nbr[o*V : o*V+V] {
				if i >= 0 {
					cc[v]++
				}
			}
		}
	})
	seg := make([]int64, V+1)
	for v := range V {
		pos := seg[v]
		for c := range nc {
			k := cnt[c*V+v]
			cnt[c*V+v] = pos
			pos += k
		}
		seg[v+1] = pos
	}
	p := &Pairs{Seg: seg, In: make([]int32, seg[V]), Out: make([]int32, seg[V])}
	parallelRows(nOut, func(lo, hi int) {
		next := cnt[lo/grain*V : lo/grain*V+V]
		for o := lo; o < hi; o++ {
			for v, i := range nbr[o*V : o*V+V] {
				if i >= 0 {
					p.In[next[v]], p.Out[next[v]] = i, int32(o)
					next[v]++
				}
			}
		}
	})
	return p
}

// Masked holds the per-row neighbour bitmasks of a table and the row order
// used by the masked implicit GEMM algorithms. Masks have Words 64-bit words
// per row, so any kernel volume works.
type Masked struct {
	V, Words int
	// Mask[r·Words + v/64] has bit v%64 set iff row r has a neighbour at
	// tap v.
	Mask []uint64
	// KeyTaps[b] is the tap read as bit b of a row's Gray key: KeyTaps's
	// order for tables of at most BalancedKeyMaxRows rows, else b.
	KeyTaps []int32
	// Gray lists the rows sorted stably by the rank of their Gray key in
	// the reflected binary Gray-code sequence (rows of equal rank keep
	// their index order), so that consecutive rows have similar masks and
	// tiles of them have small tap unions.
	Gray []int32
	// Order is the row order of the masked GEMMs: Gray regrouped window
	// by window into tiles with smaller unions where Regroups says so
	// (RegroupWindow), else Gray itself (the same slice).
	Order []int32

	mu    sync.Mutex
	tiles map[int]*Tiles
}

// Masked returns the masks and masked order of the forward table Nbr.
func (m *Map) Masked() *Masked {
	m.mustLoad("Masked")
	m.derived.mu.Lock()
	defer m.derived.mu.Unlock()
	if m.derived.masked == nil {
		m.derived.masked = newMasked(m.Nbr, m.NOut, m.V())
	}
	return m.derived.masked
}

// ReverseMasked returns the masks and masked order of the reverse table,
// used by the masked input-gradient algorithms.
func (m *Map) ReverseMasked() *Masked {
	rev := m.Reverse()
	m.derived.mu.Lock()
	defer m.derived.mu.Unlock()
	if m.derived.revMask == nil {
		m.derived.revMask = newMasked(rev, m.NIn, m.V())
	}
	return m.derived.revMask
}

func newMasked(table []int32, rows, V int) *Masked {
	words := (V + 63) / 64
	ms := &Masked{V: V, Words: words, Mask: make([]uint64, rows*words), Order: make([]int32, rows)}
	// The per-tap counts feed the balanced key only (KeyTaps).
	balanced := rows <= BalancedKeyMaxRows
	nc := (rows + grain - 1) / grain
	var counts []int64 // per chunk of rows, per tap
	if balanced {
		counts = make([]int64, nc*V)
	}
	parallelRows(rows, func(lo, hi int) {
		var cnt []int64
		if balanced {
			cnt = counts[lo/grain*V : lo/grain*V+V]
		}
		for r := lo; r < hi; r++ {
			mask := ms.Mask[r*words : r*words+words]
			for v, i := range table[r*V : r*V+V] {
				if i >= 0 {
					mask[v/64] |= 1 << (v % 64)
					if balanced {
						cnt[v]++
					}
				}
			}
			ms.Order[r] = int32(r)
		}
	})
	if balanced {
		count := make([]int64, V)
		for c := range nc {
			for v, k := range counts[c*V : c*V+V] {
				count[v] += k
			}
		}
		ms.KeyTaps = KeyTaps(count, rows)
	} else {
		ms.KeyTaps = make([]int32, V)
		for v := range ms.KeyTaps {
			ms.KeyTaps[v] = int32(v)
		}
	}
	rank := make([]uint64, rows*words)
	parallelRows(rows, func(lo, hi int) {
		key := make([]uint64, words)
		for r := lo; r < hi; r++ {
			mask := ms.Mask[r*words : r*words+words]
			if !balanced {
				// Table order: the key is the mask.
				grayToBinary(mask, rank[r*words:r*words+words])
				continue
			}
			clear(key)
			for b, v := range ms.KeyTaps {
				key[b/64] |= (mask[v/64] >> (v % 64) & 1) << (b % 64)
			}
			grayToBinary(key, rank[r*words:r*words+words])
		}
	})
	// LSD radix sort over the rank words, least significant word first;
	// each pass is stable, so the result is ordered by the whole rank and
	// then by row.
	keys := rank
	if words > 1 {
		keys = make([]uint64, rows)
	}
	for w := range words {
		if words > 1 {
			parallelRows(rows, func(lo, hi int) {
				for j := lo; j < hi; j++ {
					keys[j] = rank[int(ms.Order[j])*words+w]
				}
			})
		}
		radixSort(keys, ms.Order, min(64, V-64*w), true)
	}
	ms.Gray = ms.Order
	if Regroups(rows, words) {
		ms.Order = regroup(ms.Mask, ms.Gray)
	}
	return ms
}

// BalancedKeyMaxRows is the most rows of a table whose Gray key reads the
// taps in KeyTaps's order; larger tables read them in table order (tap v
// as bit v). Above it the masked padding is already low (1.16× at 128-row
// tiles on a 252 K-row shell) and KeyTaps's order gained under 1 % on the
// H200 (RES 256), while counting the taps and ranking the masks again
// after the brick search (which writes table-order ranks with the table)
// cost about 0.17 ms of the map build at 4.1 M rows (docs/PERF_NOTES.md,
// step 27). Engines must follow the same rule: the order is part of a
// map's derived tables.
const BalancedKeyMaxRows = 1 << 17

// KeyTaps returns the significance order of the taps in the Gray keys of
// the masked order, given count[v], the rows of rows that have a
// neighbour at tap v: element b is the tap read as bit b of the key. The
// taps that split the rows least evenly (|2·count − rows| largest) come
// first, in the low bits, ties in tap order. A tap that nearly every row
// has, or nearly none, then flips the key of few rows and breaks few runs
// of equal high bits, so rows next to each other in the order share more
// taps: on the benchmark's sphere shells the masked tile products at 128
// rows fall by 5 % at RES 64 and 4 % at RES 128 against reading the taps
// in table order (docs/PERF_NOTES.md, step 27).
func KeyTaps(count []int64, rows int) []int32 {
	taps := make([]int32, len(count))
	for v := range taps {
		taps[v] = int32(v)
	}
	uneven := func(v int32) int64 {
		d := 2*count[v] - int64(rows)
		return max(d, -d)
	}
	slices.SortStableFunc(taps, func(a, b int32) int { return cmp.Compare(uneven(b), uneven(a)) })
	return taps
}

// grayToBinary writes the rank of the multi-word Gray code g (little-endian
// words) in the reflected binary Gray sequence: the number b whose Gray
// code b ⊕ (b >> 1) is g. Bit j of b is the XOR of the bits ≥ j of g.
func grayToBinary(g, out []uint64) {
	var carry uint64 // parity of all higher words: 0 or all ones
	for w := len(g) - 1; w >= 0; w-- {
		x := g[w]
		x ^= x >> 1
		x ^= x >> 2
		x ^= x >> 4
		x ^= x >> 8
		x ^= x >> 16
		x ^= x >> 32
		out[w] = x ^ carry
		// Bit 0 of x is the parity of the whole word.
		carry = -((x ^ carry) & 1)
	}
}

// Tiles is the per-tile union of taps for tiles of Rows consecutive entries
// of a Masked order: tile t covers Order[t·Rows : min(len(Order),
// (t+1)·Rows)] and its taps are Taps[Seg[t]:Seg[t+1]], ascending.
type Tiles struct {
	Rows int
	Seg  []int32
	Taps []int32
	// Work is Σ_t |taps of t| · (rows in t): the (row, tap) products a
	// masked GEMM computes, padding included.
	Work int64
}

// Tiles returns the tap unions for tiles of rows consecutive rows of
// ms.Order (rows ≤ 0 is taken as 1), computed once per tile size and
// cached.
func (ms *Masked) Tiles(rows int) *Tiles {
	rows = max(rows, 1)
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if t, ok := ms.tiles[rows]; ok {
		return t
	}
	n := len(ms.Order)
	nt := (n + rows - 1) / rows
	W := ms.Words
	unions := make([]uint64, nt*W)
	t := &Tiles{Rows: rows, Seg: make([]int32, nt+1)}
	parallelRows(nt, func(lo, hi int) {
		for tile := lo; tile < hi; tile++ {
			u := unions[tile*W : tile*W+W]
			for _, r := range ms.Order[tile*rows : min(n, tile*rows+rows)] {
				for w, x := range ms.Mask[int(r)*W : int(r)*W+W] {
					u[w] |= x
				}
			}
			c := 0
			for _, x := range u {
				c += bits.OnesCount64(x)
			}
			t.Seg[tile+1] = int32(c)
		}
	})
	for tile := range nt {
		t.Work += int64(t.Seg[tile+1]) * int64(min(n, tile*rows+rows)-tile*rows)
		t.Seg[tile+1] += t.Seg[tile]
	}
	t.Taps = make([]int32, t.Seg[nt])
	parallelRows(nt, func(lo, hi int) {
		for tile := lo; tile < hi; tile++ {
			dst := t.Taps[t.Seg[tile]:t.Seg[tile]]
			for w, x := range unions[tile*W : tile*W+W] {
				for x != 0 {
					dst = append(dst, int32(w*64+bits.TrailingZeros64(x)))
					x &= x - 1
				}
			}
		}
	})
	if ms.tiles == nil {
		ms.tiles = make(map[int]*Tiles)
	}
	ms.tiles[rows] = t
	return t
}

// Stats summarises a map's sparsity.
type Stats struct {
	NIn, NOut, V int
	// Pairs is the number of active (output, tap) entries of Nbr.
	Pairs int64
	// Density is Pairs / (NOut·V), the fraction of taps present.
	Density float64
	// TileRows, MaskedWork and Padding describe the masked algorithms for
	// tiles of TileRows rows of the Gray-code order: MaskedWork is
	// Σ_tiles |tap union|·rows and Padding = MaskedWork / Pairs ≥ 1, the
	// factor of wasted (row, tap) products. They are zero unless Stats was
	// asked for a positive tile size.
	TileRows   int
	MaskedWork int64
	Padding    float64
}

// Stats returns the map's pair count and density and, for tileRows > 0,
// the padding of the masked algorithms at that tile size (which builds and
// caches Masked and its Tiles).
func (m *Map) Stats(tileRows int) Stats {
	m.mustLoad("Stats")
	st := Stats{NIn: m.NIn, NOut: m.NOut, V: m.V(), Pairs: m.countPairs()}
	if m.NOut > 0 {
		st.Density = float64(st.Pairs) / (float64(m.NOut) * float64(st.V))
	}
	if tileRows > 0 {
		st.TileRows = tileRows
		st.MaskedWork = m.Masked().Tiles(tileRows).Work
		if st.Pairs > 0 {
			st.Padding = float64(st.MaskedWork) / float64(st.Pairs)
		}
	}
	return st
}

// countPairs counts the non-negative entries of Nbr, using the cached pair
// lists when they exist.
func (m *Map) countPairs() int64 {
	m.derived.mu.Lock()
	p := m.derived.pairs
	m.derived.mu.Unlock()
	if p != nil {
		return p.Count()
	}
	counts := make([]int64, (len(m.Nbr)+grain-1)/grain)
	parallelRows(len(m.Nbr), func(lo, hi int) {
		var c int64
		for _, i := range m.Nbr[lo:hi] {
			if i >= 0 {
				c++
			}
		}
		counts[lo/grain] = c
	})
	var total int64
	for _, c := range counts {
		total += c
	}
	return total
}
