package cpu

import (
	"math"
	"sync"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// SampleMode selects how GridSample interpolates.
type SampleMode int

// Sampling modes, with FlexGEMM's semantics.
const (
	// Trilinear blends the 8 voxels around the query, renormalised over the
	// voxels that exist.
	Trilinear SampleMode = iota
	// Nearest takes the voxel containing the query.
	Nearest
)

// Corners returns the number of voxels a query reads: 8 for Trilinear, 1
// for Nearest.
func (s SampleMode) Corners() int {
	if s == Nearest {
		return 1
	}
	return 8
}

// WeightFloor is the lower bound on the sum of trilinear weights used as
// divisor: out = Σ w_c·f_c / max(Σ w_c, WeightFloor), as in FlexGEMM.
const WeightFloor = 1e-12

// VoxelIndex finds the feature row of a voxel from its key
// grid.Extent.Key(b, x, y, z). A *hash.Table satisfies it.
type VoxelIndex interface {
	Find(key uint64) (row int32, ok bool)
}

// SamplePlan holds, for M query points, the feature rows and weights that
// GridSample blends: query m reads rows Idx[m·K+k] (−1 = absent) with
// weights W[m·K+k], K = Mode.Corners(). It is immutable once built and safe
// for concurrent use; the reverse (row → queries) table of the feature
// gradient is built on first use and cached.
type SamplePlan struct {
	Mode SampleMode
	// M is the number of queries, N the number of feature rows.
	M, N int
	// Idx and W are [M, K]. W is the final weight of each corner: 1 for a
	// present nearest voxel, w_c / max(Σ w, WeightFloor) for trilinear; 0
	// where Idx is −1.
	Idx []int32
	W   []float64
	// Points holds the [M, 3] query points (trilinear only), kept for the
	// point gradient. NewSamplePlan keeps the slice it is given.
	Points []float64
	// Ext is the grid the features live in.
	Ext grid.Extent

	revOnce sync.Once
	revSeg  []int64 // [N+1]
	revEnt  []int32 // flattened m·K + k, ascending within each row
}

// K returns the number of corners per query.
func (p *SamplePlan) K() int { return p.Mode.Corners() }

// NewSamplePlan builds the plan of M = len(points)/3 queries over n feature
// rows whose voxels are found through look in ext. Query m belongs to batch
// m / perBatch. Points are in voxel units (voxel x covers [x, x+1)) and must
// be finite; perBatch must be positive unless there are no points, and the
// batch of every query must lie in ext (the caller checks these).
//
// Nearest reads voxel (trunc(q.x), trunc(q.y), trunc(q.z)), truncating
// toward zero as C's (int) cast does. Trilinear reads the 8 voxels
// c = floor(q − 0.5) + {0,1}³ with w_c = Π_axes (1 − |q − c − 0.5|), absent
// or out-of-bounds voxels counting 0, and divides by max(Σ w_c,
// WeightFloor).
func NewSamplePlan(look VoxelIndex, n int, ext grid.Extent, points []float64, perBatch int, mode SampleMode) *SamplePlan {
	M := len(points) / 3
	K := mode.Corners()
	p := &SamplePlan{Mode: mode, M: M, N: n, Idx: make([]int32, M*K), W: make([]float64, M*K), Ext: ext}
	if mode == Trilinear {
		p.Points = points[: 3*M : 3*M]
	}
	dims := ext.Spatial()
	poolRows(M, 8*K, func(lo, hi int) {
		for m := lo; m < hi; m++ {
			b := m / perBatch
			q := points[3*m : 3*m+3]
			idx := p.Idx[m*K : m*K+K]
			w := p.W[m*K : m*K+K]
			if mode == Nearest {
				idx[0], w[0] = -1, 0
				var v [3]int
				in := true
				for a := range 3 {
					// trunc(q) ∈ [0, dim) ⇔ q ∈ (−1, dim).
					if !(q[a] > -1 && q[a] < float64(dims[a])) {
						in = false
						break
					}
					v[a] = int(q[a])
				}
				if in {
					if r, ok := look.Find(ext.Key(b, v[0], v[1], v[2])); ok {
						idx[0], w[0] = r, 1
					}
				}
				continue
			}
			var cell trilinearCell
			cell.setup(q, dims)
			sum := 0.0
			for k := range 8 {
				idx[k], w[k] = -1, 0
				c, ok := cell.corner(k, dims)
				if !ok {
					continue
				}
				if r, found := look.Find(ext.Key(b, c[0], c[1], c[2])); found {
					idx[k] = r
					w[k] = cell.weight(k)
					sum += w[k]
				}
			}
			inv := 1 / max(sum, WeightFloor)
			for k := range w {
				w[k] *= inv
			}
		}
	})
	return p
}

// trilinearCell is the cell of a trilinear query: base corner floor(q−0.5)
// and fractional offsets t = q − 0.5 − base ∈ [0, 1) per axis. Corner k has
// offset bit a of k set (x = bit 2, y = bit 1, z = bit 0) on axis a; its
// factor is t on axes where the bit is set and 1 − t elsewhere.
type trilinearCell struct {
	base [3]int
	t    [3]float64
	far  bool // the query is so far outside that no corner can be in bounds
}

func (c *trilinearCell) setup(q []float64, dims [3]int) {
	for a := range 3 {
		f := math.Floor(q[a] - 0.5)
		// Corners base and base+1 are both out of bounds unless
		// −1 ≤ base ≤ dim−1; checking in floating point first keeps the int
		// conversion in range for huge coordinates.
		if f < -1 || f > float64(dims[a]-1) {
			c.far = true
			return
		}
		c.base[a] = int(f)
		c.t[a] = q[a] - 0.5 - f
	}
}

func cornerBit(k, a int) int { return (k >> (2 - a)) & 1 }

// corner returns corner k's voxel and whether it is in bounds.
func (c *trilinearCell) corner(k int, dims [3]int) ([3]int, bool) {
	var v [3]int
	if c.far {
		return v, false
	}
	for a := range 3 {
		v[a] = c.base[a] + cornerBit(k, a)
		if v[a] < 0 || v[a] >= dims[a] {
			return v, false
		}
	}
	return v, true
}

// factor returns corner k's weight factor on axis a.
func (c *trilinearCell) factor(k, a int) float64 {
	if cornerBit(k, a) == 1 {
		return c.t[a]
	}
	return 1 - c.t[a]
}

// weight returns the unnormalised weight of corner k.
func (c *trilinearCell) weight(k int) float64 {
	return c.factor(k, 0) * c.factor(k, 1) * c.factor(k, 2)
}

// dweight returns ∂w_k/∂q_a: ±(product of the other two factors), + where
// corner k is on the upper side of axis a.
func (c *trilinearCell) dweight(k, a int) float64 {
	d := c.factor(k, (a+1)%3) * c.factor(k, (a+2)%3)
	if cornerBit(k, a) == 0 {
		return -d
	}
	return d
}

// GridSample computes out [p.M, c] (overwritten) from feats [p.N, c]:
// out[m] = Σ_k W[m, k]·feats[Idx[m, k]], summing corners in order k = 0…K−1.
// Queries with no present corner get 0.
func GridSample[T ~float32 | ~float64](p *SamplePlan, feats []T, c int, out []T) {
	K := p.K()
	poolRows(p.M, K*c, func(lo, hi int) {
		for m := lo; m < hi; m++ {
			om := out[m*c : m*c+c]
			clear(om)
			for k, r := range p.Idx[m*K : m*K+K] {
				if r < 0 {
					continue
				}
				sampleAxpy(T(p.W[m*K+k]), feats[int(r)*c:int(r)*c+c], om)
			}
		}
	})
}

// reverse builds the CSR grouping of (query, corner) entries by feature
// row, ascending in m·K + k within each row.
func (p *SamplePlan) reverse() ([]int64, []int32) {
	p.revOnce.Do(func() {
		seg := make([]int64, p.N+1)
		for _, r := range p.Idx {
			if r >= 0 {
				seg[r+1]++
			}
		}
		for r := range p.N {
			seg[r+1] += seg[r]
		}
		ent := make([]int32, seg[p.N])
		next := make([]int64, p.N)
		copy(next, seg[:p.N])
		for j, r := range p.Idx {
			if r >= 0 {
				ent[next[r]] = int32(j)
				next[r]++
			}
		}
		p.revSeg, p.revEnt = seg, ent
	})
	return p.revSeg, p.revEnt
}

// GridSampleFeatGrad computes dFeats [p.N, c] (overwritten) from dy
// [p.M, c]: dFeats[r] = Σ W[m, k]·dy[m] over the entries with Idx[m, k] = r,
// in ascending (m, k) order. Each row is summed by one goroutine through a
// cached reverse table, so the result is deterministic without atomics.
// p.M·K must fit in an int32 (NewSamplePlan's callers check).
func GridSampleFeatGrad[T ~float32 | ~float64](p *SamplePlan, dy []T, c int, dFeats []T) {
	seg, ent := p.reverse()
	K := p.K()
	avg := 1
	if p.N > 0 {
		avg = max(1, len(ent)/p.N)
	}
	poolRows(p.N, avg*c, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			dr := dFeats[r*c : r*c+c]
			clear(dr)
			for _, j := range ent[seg[r]:seg[r+1]] {
				m := int(j) / K
				sampleAxpy(T(p.W[j]), dy[m*c:m*c+c], dr)
			}
		}
	})
}

// GridSamplePointGrad computes dPoints [p.M, 3] (overwritten) from feats
// [p.N, c] and dy [p.M, c], in float64.
//
// Nearest sampling is piecewise constant, so its gradient is 0. For
// trilinear, with S = Σ_c w_c over present corners and ŵ_c = w_c/S,
//
//	∂L/∂q_a = Σ_c (∂w_c/∂q_a / S) · (dy·f_c − dy·out),   dy·out = Σ_c ŵ_c (dy·f_c)
//
// which is the exact derivative of the renormalised blend inside a cell.
// Where a coordinate sits exactly on a cell boundary (q_a − 0.5 an integer)
// the blend has a kink and the derivative returned is the one-sided
// derivative for increasing q_a (the cell whose base is floor(q − 0.5)).
// Where S ≤ WeightFloor (no present corner carries weight, e.g. the query is
// outside the grid or only touches present voxels at zero weight), the
// renormalised blend is discontinuous and the gradient is defined as 0.
func GridSamplePointGrad[T ~float32 | ~float64](p *SamplePlan, feats, dy []T, c int, dPoints []float64) {
	if p.Mode != Trilinear {
		clear(dPoints[:3*p.M])
		return
	}
	dims := p.Ext.Spatial()
	poolRows(p.M, 8*c, func(lo, hi int) {
		for m := lo; m < hi; m++ {
			dq := dPoints[3*m : 3*m+3]
			dq[0], dq[1], dq[2] = 0, 0, 0
			idx := p.Idx[8*m : 8*m+8]
			var cell trilinearCell
			cell.setup(p.Points[3*m:3*m+3], dims)
			if cell.far {
				continue
			}
			var g [8]float64
			sum, dyOut := 0.0, 0.0
			dym := dy[m*c : m*c+c]
			for k, r := range idx {
				if r < 0 {
					continue
				}
				s := sampleDot(dym, feats[int(r)*c:int(r)*c+c])
				g[k] = s
				sum += cell.weight(k)
				dyOut += p.W[8*m+k] * s
			}
			if !(sum > WeightFloor) {
				continue
			}
			for k, r := range idx {
				if r < 0 {
					continue
				}
				e := (g[k] - dyOut) / sum
				for a := range 3 {
					dq[a] += cell.dweight(k, a) * e
				}
			}
		}
	})
}

// sampleAxpy sets y += a·x elementwise; len(y) must be at least len(x).
func sampleAxpy[T ~float32 | ~float64](a T, x, y []T) {
	y = y[:len(x)]
	for j, v := range x {
		y[j] += a * v
	}
}

// sampleDot returns Σ_j x[j]·y[j] in float64, len(y) ≥ len(x). Four
// partial sums break the dependency chain of the additions; they are
// combined in a fixed order, so the result is deterministic.
func sampleDot[T ~float32 | ~float64](x, y []T) float64 {
	y = y[:len(x)]
	var s0, s1, s2, s3 float64
	j := 0
	for ; j+4 <= len(x); j += 4 {
		s0 += float64(x[j]) * float64(y[j])
		s1 += float64(x[j+1]) * float64(y[j+1])
		s2 += float64(x[j+2]) * float64(y[j+2])
		s3 += float64(x[j+3]) * float64(y[j+3])
	}
	for ; j < len(x); j++ {
		s0 += float64(x[j]) * float64(y[j])
	}
	return (s0 + s1) + (s2 + s3)
}
