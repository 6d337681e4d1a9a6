package kmap

import (
	"fmt"
	"math"
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// sortedIndex holds the rows of a coordinate array sorted by their exact
// key ext.Key(b, x, y, z). Neighbour search walks it with one forward
// cursor per tap (a merge join), so every access is sequential: for rows
// visited in key order and a fixed tap, the neighbour keys ascend.
type sortedIndex struct {
	ext grid.Extent
	// keys ascend strictly; keys[j] is the key of row rows[j] (of row j
	// when rows is nil, i.e. the coordinates were already sorted).
	keys []uint64
	rows []int32
}

// row returns the row at sorted position j.
func (ix *sortedIndex) row(j int) int32 {
	if ix.rows == nil {
		return int32(j)
	}
	return ix.rows[j]
}

// newSortedIndex validates coords (flat [N, 4]) against ext and sorts them.
// It reports a bad length, too many rows, a row outside ext (the first
// one) and two equal rows (the earliest row r equal to an earlier row q).
func newSortedIndex(coords []int32, ext grid.Extent) (*sortedIndex, error) {
	if err := checkExtent(ext); err != nil {
		return nil, err
	}
	if len(coords)%4 != 0 {
		return nil, fmt.Errorf("%w: length %d is not a multiple of 4", ErrCoords, len(coords))
	}
	n := len(coords) / 4
	if n >= math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d rows overflow 32-bit row indices", ErrTooLarge, n)
	}
	ix := &sortedIndex{ext: ext, keys: make([]uint64, n)}
	nc := (n + grain - 1) / grain
	bad := make([]int, nc)       // first row outside ext per chunk, or −1
	unsorted := make([]bool, nc) // keys not strictly ascending in the chunk
	parallelChunks(nc, func(c int) {
		lo, hi := c*grain, min(n, c*grain+grain)
		bad[c] = -1
		prev, first := uint64(0), true
		for r := lo; r < hi; r++ {
			b, x, y, z := int(coords[4*r]), int(coords[4*r+1]), int(coords[4*r+2]), int(coords[4*r+3])
			if !ext.Contains(b, x, y, z) {
				bad[c] = r
				return
			}
			k := ext.Key(b, x, y, z)
			ix.keys[r] = k
			if !first && k <= prev {
				unsorted[c] = true
			}
			prev, first = k, false
		}
	})
	for c, r := range bad {
		if r >= 0 {
			return nil, fmt.Errorf("%w: row %d (%d, %d, %d, %d) is outside %v", ErrOutOfRange, r,
				coords[4*r], coords[4*r+1], coords[4*r+2], coords[4*r+3], ext)
		}
		if c > 0 && ix.keys[c*grain] <= ix.keys[c*grain-1] {
			unsorted[c] = true
		}
	}
	if !slices.Contains(unsorted, true) {
		return ix, nil
	}
	ix.rows = make([]int32, n)
	for r := range ix.rows {
		ix.rows[r] = int32(r)
	}
	radixSort(ix.keys, ix.rows, keyBits(ext.Sites()), true)
	// The sort is stable, so in a run of equal keys the rows ascend: the
	// run's second row is the earliest row equal to an earlier one.
	q, r := -1, -1
	for j := 1; j < n; j++ {
		if ix.keys[j] == ix.keys[j-1] && (r < 0 || int(ix.rows[j]) < r) {
			if j == 1 || ix.keys[j-2] != ix.keys[j] { // second of its run
				q, r = int(ix.rows[j-1]), int(ix.rows[j])
			}
		}
	}
	if r >= 0 {
		return nil, fmt.Errorf("%w: rows %d and %d are both (%d, %d, %d, %d)", ErrDuplicate, q, r,
			coords[4*r], coords[4*r+1], coords[4*r+2], coords[4*r+3])
	}
	return ix, nil
}

// checkExtent validates ext and requires every dimension to fit the int32
// coordinates.
func checkExtent(ext grid.Extent) error {
	if err := ext.Validate(); err != nil {
		return err
	}
	for _, d := range [4]int{ext.Batch, ext.X, ext.Y, ext.Z} {
		if d > math.MaxInt32 {
			return fmt.Errorf("%w: %v has a dimension beyond int32 coordinates", ErrTooLarge, ext)
		}
	}
	return nil
}

// direction says how a query site and a tap give the indexed site on
// each axis.
type direction int

const (
	// fineFromCoarse: indexed = query·S − P + k·D (submanifold, strided:
	// the query is an output, the indexed site an input).
	fineFromCoarse direction = iota
	// coarseFromFine: indexed·S − P + k·D = query (transposed: the query
	// is a fine output, the indexed site a coarse input).
	coarseFromFine
)

// maxPlan bounds the size of a per-axis tap table (entries). A variable so
// that tests can force the computed path.
var maxPlan = 1 << 20

// axisPlan answers, for one axis, which taps k of a query coordinate q
// reach an indexed coordinate t inside [0, size), and which t. For a query
// range small enough it reads a table built once, so the hot loops do no
// division; otherwise it computes the answer.
type axisPlan struct {
	S, P, D, K, size int
	dir              direction
	cnt              []int32 // cnt[q]: taps of q; nil when computed
	k, t             []int32 // [qdim·K]: the taps of q at [q·K, q·K+cnt[q])
}

// newAxisPlan plans axis a for query coordinates in [0, qdim).
func newAxisPlan(conv grid.Conv, dir direction, a, qdim, size int) *axisPlan {
	p := &axisPlan{S: conv.Stride[a], P: conv.Padding[a], D: conv.Dilation[a], K: conv.Kernel[a], size: size, dir: dir}
	if qdim*p.K <= maxPlan {
		p.cnt = make([]int32, qdim)
		p.k, p.t = make([]int32, qdim*p.K), make([]int32, qdim*p.K)
		for q := range qdim {
			p.cnt[q] = int32(p.compute(q, p.k[q*p.K:q*p.K+p.K], p.t[q*p.K:q*p.K+p.K]))
		}
	}
	return p
}

// compute writes the taps of q and their targets to ks and ts (K entries
// of room) and returns how many there are, taps ascending. The division
// happens only on a non-negative numerator whose remainder is zero, so
// truncation and floor division agree.
func (p *axisPlan) compute(q int, ks, ts []int32) int {
	n := 0
	for k := range p.K {
		var t int
		if p.dir == fineFromCoarse {
			t = q*p.S - p.P + k*p.D
		} else {
			num := q + p.P - k*p.D
			if num < 0 || num%p.S != 0 {
				continue
			}
			t = num / p.S
		}
		if t >= 0 && t < p.size {
			ks[n], ts[n] = int32(k), int32(t)
			n++
		}
	}
	return n
}

// taps returns the taps of q and their targets, from the table or computed
// into the scratch slices ks and ts (K entries of room).
func (p *axisPlan) taps(q int, ks, ts []int32) ([]int32, []int32) {
	if q < len(p.cnt) {
		o := q * p.K
		n := int(p.cnt[q])
		return p.k[o : o+n], p.t[o : o+n]
	}
	n := p.compute(q, ks, ts)
	return ks[:n], ts[:n]
}

// plans returns the three axis plans for queries in qext reaching sites of
// target.
func plans(conv grid.Conv, dir direction, qext, target grid.Extent) [3]*axisPlan {
	qd, td := qext.Spatial(), target.Spatial()
	var ps [3]*axisPlan
	for a := range 3 {
		ps[a] = newAxisPlan(conv, dir, a, qd[a], td[a])
	}
	return ps
}

// scratch returns per-axis scratch slices for axisPlan.taps.
func scratch(conv grid.Conv) (ks, ts [3][]int32) {
	for a := range 3 {
		ks[a], ts[a] = make([]int32, conv.Kernel[a]), make([]int32, conv.Kernel[a])
	}
	return ks, ts
}

// gather fills nbr[o·V + v] for every query row o of qc (flat [NQ, 4]) with
// the row of ix at the site tap v of o reaches in direction dir, or −1.
// qext is the extent of the queries. Queries are visited in ascending key order, qOrder[j] being the j-th
// (nil: qc is sorted); then the target keys of each tap ascend too and one
// forward cursor per tap finds them all.
//
// With mirror (submanifold maps only: the queries are the indexed rows and
// tap V−1−v is the mirror image of tap v) only the taps v < V/2 are
// searched: a hit i of query o fills both Nbr[o, v] = i and
// Nbr[i, V−1−v] = o, and the centre tap is o itself. nbr must then be
// filled with −1 beforehand. Every entry still has exactly one writer.
func gather(nbr []int32, qc []int32, qext grid.Extent, qOrder []int32, ix *sortedIndex, conv grid.Conv, dir direction, mirror bool) {
	V := conv.Volume()
	nq := len(qc) / 4
	ext := ix.ext
	X, Y, Z := uint64(ext.X), uint64(ext.Y), uint64(ext.Z)
	ps := plans(conv, dir, qext, ext)
	keys := ix.keys
	nk := len(keys)
	K1, K2 := conv.Kernel[1], conv.Kernel[2]
	parallelRows(nq, func(lo, hi int) {
		ks, ts := scratch(conv)
		cur := make([]int, V) // cursor per tap, −1 until first used
		for v := range cur {
			cur[v] = -1
		}
		for j := lo; j < hi; j++ {
			o := j
			if qOrder != nil {
				o = int(qOrder[j])
			}
			q := qc[4*o : 4*o+4 : 4*o+4]
			row := nbr[o*V : o*V+V : o*V+V]
			if mirror {
				row[V/2] = int32(o)
			} else {
				for v := range row {
					row[v] = -1
				}
			}
			kx, tx := ps[0].taps(int(q[1]), ks[0], ts[0])
			ky, ty := ps[1].taps(int(q[2]), ks[1], ts[1])
			kz, tz := ps[2].taps(int(q[3]), ks[2], ts[2])
			b := uint64(q[0])
			for i0, t0 := range tx {
				bx := (b*X + uint64(t0)) * Y
				vx := int(kx[i0]) * K1
				for i1, t1 := range ty {
					by := (bx + uint64(t1)) * Z
					vb := (vx + int(ky[i1])) * K2
					if mirror && vb >= V/2 {
						break
					}
					for i2, t2 := range tz {
						key := by + uint64(t2)
						v := vb + int(kz[i2])
						if mirror && v >= V/2 {
							break
						}
						p := cur[v]
						switch {
						case p < 0:
							p, _ = slices.BinarySearch(keys, key)
						case p < nk && keys[p] < key:
							// Usually the cursor moves by one row.
							if p++; p < nk && keys[p] < key {
								p = seek(keys, p+1, key)
							}
						}
						cur[v] = p
						if p < nk && keys[p] == key {
							i := ix.row(p)
							row[v] = i
							if mirror {
								nbr[int(i)*V+V-1-v] = int32(o)
							}
						}
					}
				}
			}
		}
	})
}

// seek returns the first position ≥ p whose key is ≥ key. It steps
// linearly (the usual case: the cursor moves by a few rows) and switches to
// a galloping binary search for long jumps, so a sparse query side costs
// O(log gap) per step.
func seek(keys []uint64, p int, key uint64) int {
	for range 8 {
		if p >= len(keys) || keys[p] >= key {
			return p
		}
		p++
	}
	step := 16
	for p+step < len(keys) && keys[p+step] < key {
		p += step + 1
		step *= 2
	}
	hi := min(len(keys), p+step+1)
	off, _ := slices.BinarySearch(keys[p:hi], key)
	return p + off
}
