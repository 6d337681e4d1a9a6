package kmap

import (
	"math/bits"
	"runtime"
	"slices"
	"sync"
)

type derivedCache struct {
	mu       sync.Mutex
	rev      []int32
	pairs    *Pairs
	masked   *Masked
	revMask  *Masked
	haveRev  bool
	haveMask bool
}

// Reverse returns the [NIn, V] reverse table: Rev[i·V+v] = o where
// Nbr[o·V+v] = i, or −1. It is computed once and cached.
func (m *Map) Reverse() []int32 {
	m.derived.mu.Lock()
	defer m.derived.mu.Unlock()
	if !m.derived.haveRev {
		m.derived.rev = reverseTable(m.Nbr, m.NOut, m.NIn, m.V())
		m.derived.haveRev = true
	}
	return m.derived.rev
}

func reverseTable(nbr []int32, nOut, nIn, V int) []int32 {
	rev := make([]int32, nIn*V)
	for j := range rev {
		rev[j] = -1
	}
	for o := range nOut {
		for v, i := range nbr[o*V : o*V+V] {
			if i >= 0 {
				rev[int(i)*V+v] = int32(o)
			}
		}
	}
	return rev
}

// Pairs lists the active (input, output) row pairs of a map grouped by tap:
// pairs of tap v are In[Seg[v]:Seg[v+1]] and Out[Seg[v]:Seg[v+1]], with
// output rows ascending inside each tap.
type Pairs struct {
	Seg     []int64 // [V+1]
	In, Out []int32 // [Seg[V]]
}

// Count returns the total number of active pairs.
func (p *Pairs) Count() int64 { return p.Seg[len(p.Seg)-1] }

// Pairs returns the per-tap pair lists, computed once and cached.
func (m *Map) Pairs() *Pairs {
	m.derived.mu.Lock()
	defer m.derived.mu.Unlock()
	if m.derived.pairs == nil {
		m.derived.pairs = pairLists(m.Nbr, m.NOut, m.V())
	}
	return m.derived.pairs
}

func pairLists(nbr []int32, nOut, V int) *Pairs {
	seg := make([]int64, V+1)
	for o := range nOut {
		for v, i := range nbr[o*V : o*V+V] {
			if i >= 0 {
				seg[v+1]++
			}
		}
	}
	for v := range V {
		seg[v+1] += seg[v]
	}
	p := &Pairs{Seg: seg, In: make([]int32, seg[V]), Out: make([]int32, seg[V])}
	next := slices.Clone(seg[:V])
	for o := range nOut {
		for v, i := range nbr[o*V : o*V+V] {
			if i >= 0 {
				p.In[next[v]], p.Out[next[v]] = i, int32(o)
				next[v]++
			}
		}
	}
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
	// Order lists the rows sorted (stably) by the rank of their mask in the
	// reflected binary Gray-code sequence, so that consecutive rows have
	// similar masks and tiles of them have small tap unions.
	Order []int32

	mu    sync.Mutex
	tiles map[int]*Tiles
}

// Tiles is the per-tile union of taps for tiles of Rows consecutive entries
// of a Masked order: the taps of tile t are Taps[Seg[t]:Seg[t+1]],
// ascending.
type Tiles struct {
	Rows int
	Seg  []int32
	Taps []int32
}

// Masked returns the masks and Gray-code order of the forward table Nbr.
func (m *Map) Masked() *Masked {
	m.derived.mu.Lock()
	defer m.derived.mu.Unlock()
	if m.derived.masked == nil {
		m.derived.masked = newMasked(m.Nbr, m.NOut, m.V())
	}
	return m.derived.masked
}

// ReverseMasked returns the masks and Gray-code order of the reverse table,
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
	rank := make([]uint64, rows*words)
	parallelRows(rows, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			mask := ms.Mask[r*words : r*words+words]
			for v, i := range table[r*V : r*V+V] {
				if i >= 0 {
					mask[v/64] |= 1 << (v % 64)
				}
			}
			grayToBinary(mask, rank[r*words:r*words+words])
		}
	})
	for r := range ms.Order {
		ms.Order[r] = int32(r)
	}
	slices.SortStableFunc(ms.Order, func(a, b int32) int {
		ra := rank[int(a)*words : int(a)*words+words]
		rb := rank[int(b)*words : int(b)*words+words]
		for w := words - 1; w >= 0; w-- {
			if ra[w] != rb[w] {
				if ra[w] < rb[w] {
					return -1
				}
				return 1
			}
		}
		return 0
	})
	return ms
}

// grayToBinary writes the binary rank of the multi-word Gray code g
// (little-endian words): bit j of the rank is the XOR of bits ≥ j of g.
func grayToBinary(g, out []uint64) {
	var carry uint64 // parity of all higher words
	for w := len(g) - 1; w >= 0; w-- {
		x := g[w]
		x ^= x >> 1
		x ^= x >> 2
		x ^= x >> 4
		x ^= x >> 8
		x ^= x >> 16
		x ^= x >> 32
		if carry != 0 {
			x = ^x
		}
		out[w] = x
		carry = uint64(bits.OnesCount64(g[w])&1) ^ carry
	}
}

// Tiles returns the tap unions for tiles of rows consecutive rows of
// ms.Order, computed once per tile size and cached.
func (ms *Masked) Tiles(rows int) *Tiles {
	if rows <= 0 {
		rows = 1
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if t, ok := ms.tiles[rows]; ok {
		return t
	}
	n := len(ms.Order)
	nt := (n + rows - 1) / rows
	t := &Tiles{Rows: rows, Seg: make([]int32, nt+1)}
	union := make([]uint64, ms.Words)
	for tile := range nt {
		clear(union)
		for _, r := range ms.Order[tile*rows : min(n, tile*rows+rows)] {
			for w, x := range ms.Mask[int(r)*ms.Words : int(r)*ms.Words+ms.Words] {
				union[w] |= x
			}
		}
		for w, x := range union {
			for x != 0 {
				b := bits.TrailingZeros64(x)
				t.Taps = append(t.Taps, int32(w*64+b))
				x &= x - 1
			}
		}
		t.Seg[tile+1] = int32(len(t.Taps))
	}
	if ms.tiles == nil {
		ms.tiles = make(map[int]*Tiles)
	}
	ms.tiles[rows] = t
	return t
}

// parallelRows splits [0, n) into contiguous chunks run on separate
// goroutines. Each row is handled by exactly one goroutine, so results do
// not depend on the number of workers.
func parallelRows(n int, f func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), (n+4095)/4096)
	if workers <= 1 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			f(lo, hi)
		}(lo, min(n, lo+chunk))
	}
	wg.Wait()
}
