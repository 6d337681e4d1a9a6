package main

import (
	"math/bits"
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// regroupMaxRows bounds the maps `bench padding -regroup` regroups with a
// sliding window: the greedy below costs rows × window mask comparisons
// (the windowed greedies, regroupWindows and regroupRemainders, are not
// bounded).
const regroupMaxRows = 1 << 19

// regroupTiles is an experiment of `bench padding -regroup`: it regroups
// the order of ms (the Gray order, as the caller passes it) into tiles of
// bm rows greedily and returns the new order. Each tile starts with the
// first row of the Gray order not yet placed; then, bm − 1 times, it takes
// the unplaced row among the next window rows of the order that adds the
// fewest taps to the tile's union (the earliest on ties). The masked kernels would accept any such order
// (a tile's taps are the union of its rows'); whether it pays depends on
// how many (row, tap) products it saves, which Padding of the result
// tells.
func regroupTiles(ms *kmap.Masked, bm, window int) []int32 {
	g := newRegrouping(ms, window)
	for g.startTile(window) {
		for k := 1; k < bm && len(g.cands) > 0; k++ {
			best, bestAdd := 0, -1
			for i, p := range g.cands {
				if add := g.adds(p); bestAdd < 0 || add < bestAdd {
					best, bestAdd = i, add
					if add == 0 {
						break
					}
				}
			}
			g.take(g.cands[best])
			g.cands = slices.Delete(g.cands, best, best+1)
		}
	}
	return g.order
}

// regrouping is regroupTiles' state: which positions of ms.Order are
// placed, the order built so far, and the current tile's tap union and
// candidates (unplaced positions after its first row).
type regrouping struct {
	ms     *kmap.Masked
	placed []bool // by position in ms.Order
	order  []int32
	union  []uint64
	cands  []int
	next   int // first unplaced position
}

func newRegrouping(ms *kmap.Masked, window int) *regrouping {
	return &regrouping{ms: ms, placed: make([]bool, len(ms.Order)), order: make([]int32, 0, len(ms.Order)),
		union: make([]uint64, ms.Words), cands: make([]int, 0, window)}
}

// mask returns the tap mask of the row at position pos of the Gray order.
func (g *regrouping) mask(pos int) []uint64 {
	r, W := int(g.ms.Order[pos]), g.ms.Words
	return g.ms.Mask[r*W : r*W+W]
}

// adds returns how many taps the row at pos would add to the tile's union.
func (g *regrouping) adds(pos int) int {
	a := 0
	for w, x := range g.mask(pos) {
		a += bits.OnesCount64(x &^ g.union[w])
	}
	return a
}

// place appends the row at pos to the order (its taps must be in the
// union already, or be added by the caller).
func (g *regrouping) place(pos int) {
	g.placed[pos] = true
	g.order = append(g.order, g.ms.Order[pos])
}

// take places the row at pos and adds its taps to the tile's union.
func (g *regrouping) take(pos int) {
	g.place(pos)
	for w, x := range g.mask(pos) {
		g.union[w] |= x
	}
}

// startTile starts a tile with the first unplaced row of the Gray order
// and makes the next window unplaced rows after it the candidates; false
// when every row is placed.
func (g *regrouping) startTile(window int) bool {
	if len(g.order) == len(g.ms.Order) {
		return false
	}
	for g.placed[g.next] {
		g.next++
	}
	g.place(g.next)
	copy(g.union, g.mask(g.next))
	g.cands = g.cands[:0]
	for p := g.next + 1; p < len(g.ms.Order) && len(g.cands) < window; p++ {
		if !g.placed[p] {
			g.cands = append(g.cands, p)
		}
	}
	return true
}

// withOrder returns ms's masks with their rows in order instead.
func withOrder(ms *kmap.Masked, order []int32) *kmap.Masked {
	return &kmap.Masked{V: ms.V, Words: ms.Words, Mask: ms.Mask, Order: order}
}

// orderTiles returns the tap unions of tiles of bm consecutive rows of
// order over the masks of ms (kmap's Tiles(bm) of the masks in that order).
func orderTiles(ms *kmap.Masked, order []int32, bm int) *kmap.Tiles {
	return withOrder(ms, order).Tiles(bm)
}

// orderWork returns the (row, tap) products a masked GEMM computes with
// tiles of bm consecutive rows of order over the masks of ms.
func orderWork(ms *kmap.Masked, order []int32, bm int) int64 {
	return orderTiles(ms, order, bm).Work
}

// regroupWindows is the engines' regrouping (kmap.RegroupWindow) of each
// window of window rows of the Gray order of ms (the last may be shorter)
// into tiles of bm rows, with the mean and the largest number of passes
// over one window: what one GPU block per window scans in sequence. An
// experiment of `bench padding -regroup W -windows` (the engines use
// kmap.RegroupWindowRows and kmap.RegroupTileRows).
func regroupWindows(ms *kmap.Masked, bm, window int) (order []int32, mean float64, most int) {
	order = make([]int32, len(ms.Gray))
	total, windows := 0, 0
	for lo := 0; lo < len(ms.Gray); lo += window {
		hi := min(lo+window, len(ms.Gray))
		p := kmap.RegroupWindow(ms.Mask, ms.Gray[lo:hi], bm, order[lo:hi])
		total += p
		most = max(most, p)
		windows++
	}
	if windows > 0 {
		mean = float64(total) / float64(windows)
	}
	return order, mean, most
}

// rowMask returns the tap mask of row r of ms.
func rowMask(ms *kmap.Masked, r int32) []uint64 {
	return ms.Mask[int(r)*ms.Words : int(r)*ms.Words+ms.Words]
}

// wholeClassTiles splits the Gray order of ms into its mask classes (runs
// of equal masks) and returns each class's whole tiles of bm rows, in Gray
// order, and the rows each class leaves over (fewer than bm, in Gray
// order; classes that fill whole tiles leave none).
func wholeClassTiles(ms *kmap.Masked, bm int) (whole []int32, rest [][]int32) {
	whole = make([]int32, 0, len(ms.Gray))
	for lo := 0; lo < len(ms.Gray); {
		hi := lo + 1
		for hi < len(ms.Gray) && slices.Equal(rowMask(ms, ms.Gray[hi]), rowMask(ms, ms.Gray[lo])) {
			hi++
		}
		n := (hi - lo) / bm * bm
		whole = append(whole, ms.Gray[lo:lo+n]...)
		if lo+n < hi {
			rest = append(rest, ms.Gray[lo+n:hi])
		}
		lo = hi
	}
	return whole, rest
}

// regroupRemainders is an experiment of `bench padding -regroup W
// -windows -fullfirst`: each mask class of the Gray order of ms gives its
// whole tiles of bm rows first, with no padding (wholeClassTiles); the
// rows left over keep their Gray order and are regrouped in windows of
// window rows as regroupWindows does. On the benchmark's shells a third
// (RES 256) to nine tenths (RES 1024) of the rows fill such tiles, so a
// window of the remainders spans more of the Gray order than a window of
// all rows. It returns the order and regroupWindows' mean and largest
// passes over the remainders' windows.
func regroupRemainders(ms *kmap.Masked, bm, window int) (order []int32, mean float64, most int) {
	order, rest := wholeClassTiles(ms, bm)
	if len(rest) == 0 {
		return order, 0, 0
	}
	tail, mean, most := regroupWindows(&kmap.Masked{V: ms.V, Words: ms.Words, Mask: ms.Mask, Gray: slices.Concat(rest...)}, bm, window)
	return append(order, tail...), mean, most
}

// regroupMerge is an experiment of `bench padding -merge`: a row order
// built by merging clusters of rows in rounds, each round's decisions
// independent of one another (what parallel blocks could make). Each mask
// class of the Gray order of ms gives its whole tiles of bm rows first
// (wholeClassTiles); every class's rows left over form a cluster. In
// a round every cluster picks the partner that adds the fewest products
// per row, (a + b)·|A ∪ B| − a·|A| − b·|B| over a + b rows for clusters of
// a and b rows and tap unions A and B (the lowest position on ties), and
// the pairs that pick each other merge, the merged cluster taking the
// first's position; a cluster of bm rows or more gives whole tiles at once,
// its rows taken class by class, classes of more taps first. The rounds
// end when no pair merges; the rows of the clusters left follow in their
// order. It returns the order and the number of rounds.
func regroupMerge(ms *kmap.Masked, bm int) (order []int32, rounds int) {
	taps := func(m []uint64) int {
		n := 0
		for _, x := range m {
			n += bits.OnesCount64(x)
		}
		return n
	}
	type cluster struct {
		parts [][]int32 // rows of one class each, Gray order
		rows  int
		union []uint64
	}
	order, rest := wholeClassTiles(ms, bm)
	cl := make([]*cluster, len(rest))
	for i, rows := range rest {
		cl[i] = &cluster{parts: [][]int32{rows}, rows: len(rows), union: slices.Clone(rowMask(ms, rows[0]))}
	}
	union := make([]uint64, ms.Words)
	cost := func(a, b *cluster) float64 {
		for w := range union {
			union[w] = a.union[w] | b.union[w]
		}
		n := a.rows + b.rows
		return float64(n*taps(union)-a.rows*taps(a.union)-b.rows*taps(b.union)) / float64(n)
	}
	// emit appends whole tiles of c's rows to the order while it has bm
	// rows or more, and recomputes its union from the rows it keeps.
	emit := func(c *cluster) {
		if c.rows < bm {
			return
		}
		slices.SortStableFunc(c.parts, func(x, y []int32) int { return taps(rowMask(ms, y[0])) - taps(rowMask(ms, x[0])) })
		for c.rows >= bm {
			for room := bm; room > 0; {
				k := min(room, len(c.parts[0]))
				order = append(order, c.parts[0][:k]...)
				c.parts[0] = c.parts[0][k:]
				if len(c.parts[0]) == 0 {
					c.parts = c.parts[1:]
				}
				room -= k
				c.rows -= k
			}
		}
		clear(c.union)
		for _, p := range c.parts {
			for w, x := range rowMask(ms, p[0]) {
				c.union[w] |= x
			}
		}
	}
	best := make([]int, 0, len(cl))
	for len(cl) > 1 {
		rounds++
		best = best[:0]
		for i, a := range cl {
			bi, bc := -1, 0.0
			for j, b := range cl {
				if j == i {
					continue
				}
				if c := cost(a, b); bi < 0 || c < bc {
					bi, bc = j, c
				}
			}
			best = append(best, bi)
		}
		next := cl[:0:0]
		merged := 0
		for i, c := range cl {
			j := best[i]
			switch {
			case best[j] == i && i < j:
				c.parts = append(c.parts, cl[j].parts...)
				c.rows += cl[j].rows
				for w, x := range cl[j].union {
					c.union[w] |= x
				}
				merged++
				emit(c)
				if c.rows > 0 {
					next = append(next, c)
				}
			case best[j] == i: // merged into cl[j] above
			default:
				next = append(next, c)
			}
		}
		cl = next
		if merged == 0 {
			break
		}
	}
	for _, c := range cl {
		for _, p := range c.parts {
			order = append(order, p...)
		}
	}
	return order, rounds
}
