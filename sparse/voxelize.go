package sparse

import (
	"fmt"
	"math"

	"github.com/flexgemm-go/flexgemm/sparse/serialize"
)

// VoxelizeOptions configures Voxelize.
type VoxelizeOptions struct {
	// VoxelSize is the edge length of a voxel along x, y and z. Each must
	// be positive and finite.
	VoxelSize [3]float64
	// Origin is the corner of voxel (0, 0, 0): point p falls in voxel
	// ⌊(p − Origin) / VoxelSize⌋ per axis (floor, also for points below
	// the origin).
	Origin [3]float64
	// Batch optionally gives the batch index of every point ([P]). Nil
	// puts every point in batch 0.
	Batch []int32
	// Extent is the grid the voxels must lie in. The zero Extent derives
	// the smallest grid from 0 that covers every voxel: Batch, X, Y, Z =
	// 1 + the largest batch index and coordinates ({1, 1, 1, 1} when no
	// point is kept).
	Extent Extent
	// DropOutside drops points whose voxel lies outside the grid (a
	// negative coordinate, or one past a given Extent) instead of failing;
	// their Index is −1. Points with NaN or infinite coordinates and
	// negative batch indices are errors either way.
	DropOutside bool
}

// Voxelization is the result of Voxelize.
type Voxelization struct {
	// Coords holds the M distinct voxels, [M, 4] (batch, x, y, z), sorted
	// by (batch, x, y, z).
	Coords []int32
	// Feats holds the mean of the features of each voxel's points, [M, C],
	// with the element type of the input features (sums are accumulated in
	// float64, in point order). It is the zero Matrix when Voxelize got
	// none.
	Feats Matrix
	// Index gives every point's voxel row, [P]; −1 for a dropped point.
	Index []int32
	// Counts gives the number of points in every voxel, [M].
	Counts []int32
	// Extent is the grid of the voxels (the given one, or the derived one).
	Extent Extent
}

// Tensor returns the voxels as a Tensor sharing Coords and Feats. It
// fails when Voxelize got no features.
func (v *Voxelization) Tensor() (*Tensor, error) {
	if v.Feats.IsZero() {
		return nil, fmt.Errorf("%w: the voxelisation has no features; pass per-point features to Voxelize", ErrShape)
	}
	return &Tensor{Coords: v.Coords, Feats: v.Feats, Extent: v.Extent}, nil
}

// voxelChunk is the number of points per parallel work item.
const voxelChunk = 1 << 14

// Voxelize groups points (flat [P, 3], x, y, z) into voxels of
// opt.VoxelSize anchored at opt.Origin, and mean-pools their features
// (a host [P, C] float32 or float64 Matrix, or the zero Matrix for none).
// The result lists each occupied voxel once, sorted by (batch, x, y, z),
// with every point's voxel row. P = 0 gives empty results.
//
// Errors, each naming the first offending point: a points length not a
// multiple of 3, features or batch indices whose length is not P
// (ErrShape), a NaN or infinite coordinate or a negative batch index
// (ErrOutOfRange), a bad voxel size or origin (ErrOutOfRange), a voxel
// outside the grid unless opt.DropOutside (ErrOutOfRange), a derived grid
// larger than 2^64 sites (grid.ErrBadExtent), and more than 2^31 − 1
// points (ErrIndexOverflow).
func Voxelize[T Float](points []T, feats Matrix, opt VoxelizeOptions) (*Voxelization, error) {
	if len(points)%3 != 0 {
		return nil, fmt.Errorf("%w: Voxelize: point array of length %d is not [P, 3]", ErrShape, len(points))
	}
	p := len(points) / 3
	if p > math.MaxInt32-1 {
		return nil, fmt.Errorf("%w: Voxelize: %d points exceed 32-bit indices", ErrIndexOverflow, p)
	}
	if err := checkVoxelizeArgs(p, feats, &opt); err != nil {
		return nil, err
	}
	given := opt.Extent != Extent{}

	// Pass 1: check every point and find the largest coordinates of the
	// kept ones (per chunk, reduced in chunk order below). Voxel indices
	// are recomputed in pass 2 rather than stored: P·16 bytes saved.
	chunks := (p + voxelChunk - 1) / voxelChunk
	type chunkResult struct {
		bad    int // first bad point, or −1
		reason string
		hi     [4]int32
		drops  int
	}
	res := make([]chunkResult, chunks)
	fixedRanges(p, voxelChunk, func(lo, hi int) {
		r := &res[lo/voxelChunk]
		r.bad = -1
		r.hi = [4]int32{-1, -1, -1, -1}
		for i := lo; i < hi; i++ {
			v, ok, reason := voxelOf(points[3*i:3*i+3], i, &opt, given)
			if reason != "" {
				r.bad, r.reason = i, reason
				return
			}
			if !ok {
				r.drops++
				continue
			}
			for a := range 4 {
				r.hi[a] = max(r.hi[a], v[a])
			}
		}
	})
	hi := [4]int32{-1, -1, -1, -1}
	drops := 0
	for _, r := range res {
		if r.bad >= 0 {
			return nil, fmt.Errorf("%w: Voxelize: %s", ErrOutOfRange, r.reason)
		}
		for a := range 4 {
			hi[a] = max(hi[a], r.hi[a])
		}
		drops += r.drops
	}
	ext := opt.Extent
	if !given {
		ext = Extent{Batch: 1, X: 1, Y: 1, Z: 1}
		if hi[0] >= 0 {
			ext = Extent{Batch: int(hi[0]) + 1, X: int(hi[1]) + 1, Y: int(hi[2]) + 1, Z: int(hi[3]) + 1}
		}
		if err := ext.Validate(); err != nil {
			return nil, fmt.Errorf("sparse: Voxelize: derived grid: %w", err)
		}
	}

	// Pass 2: the exact key of every point (dropped: sentinel), then the
	// kept points sorted by key; equal keys are one voxel.
	const dropped = math.MaxUint64 // above every key: ext has < 2^64 sites
	keys := make([]uint64, p)
	fixedRanges(p, voxelChunk, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v, ok, _ := voxelOf(points[3*i:3*i+3], i, &opt, given)
			if !ok {
				keys[i] = dropped
				continue
			}
			keys[i] = ext.Key(int(v[0]), int(v[1]), int(v[2]), int(v[3]))
		}
	})
	var kept []int32 // kept[k] = point of key k; nil when no point is dropped
	if drops > 0 {
		kept = make([]int32, 0, p-drops)
		w := 0
		for i, k := range keys {
			if k != dropped {
				kept = append(kept, int32(i))
				keys[w] = k
				w++
			}
		}
		keys = keys[:w]
	}
	point := func(k int32) int32 {
		if kept == nil {
			return k
		}
		return kept[k]
	}
	order, sortedKeys, err := serialize.SortCodes(keys)
	if err != nil {
		return nil, fmt.Errorf("%w: Voxelize: %w", ErrIndexOverflow, err)
	}
	index := make([]int32, p)
	if drops > 0 {
		for i := range index {
			index[i] = -1
		}
	}
	starts := make([]int32, 0, len(order)+1) // where each voxel's run starts in order
	for j, k := range order {
		if j == 0 || sortedKeys[j] != sortedKeys[j-1] {
			starts = append(starts, int32(j))
		}
		index[point(k)] = int32(len(starts) - 1)
	}
	m := len(starts)
	starts = append(starts, int32(len(order)))
	out := &Voxelization{
		Coords: make([]int32, 4*m),
		Index:  index,
		Counts: make([]int32, m),
		Extent: ext,
	}
	for v := range m {
		b, x, y, z := ext.Unkey(sortedKeys[starts[v]])
		d := out.Coords[4*v : 4*v+4 : 4*v+4]
		d[0], d[1], d[2], d[3] = int32(b), int32(x), int32(y), int32(z)
		out.Counts[v] = starts[v+1] - starts[v]
	}
	if feats.IsZero() {
		return out, nil
	}
	switch d := feats.Data.(type) {
	case []float32:
		out.Feats = Matrix{Rows: m, Cols: feats.Cols, Data: meanPool(d, feats.Cols, kept, order, starts)}
	case []float64:
		out.Feats = Matrix{Rows: m, Cols: feats.Cols, Data: meanPool(d, feats.Cols, kept, order, starts)}
	}
	return out, nil
}

func checkVoxelizeArgs(p int, feats Matrix, opt *VoxelizeOptions) error {
	if !feats.IsZero() {
		if err := feats.Validate(); err != nil {
			return fmt.Errorf("sparse: Voxelize: features: %w", err)
		}
		if feats.Rows != p {
			return &ShapeError{Op: "Voxelize", Arg: "feats", Want: fmt.Sprintf("[%d, C]", p), Got: feats.Shape()}
		}
		switch feats.Data.(type) {
		case []float32, []float64:
		default:
			return fmt.Errorf("%w: Voxelize pools host float32 or float64 features, got %T", ErrDType, feats.Data)
		}
	}
	if opt.Batch != nil && len(opt.Batch) != p {
		return fmt.Errorf("%w: Voxelize: %d batch indices for %d points", ErrShape, len(opt.Batch), p)
	}
	for a := range 3 {
		if s := opt.VoxelSize[a]; !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("%w: Voxelize: voxel size %v must be positive and finite on every axis", ErrOutOfRange, opt.VoxelSize)
		}
		if o := opt.Origin[a]; math.IsNaN(o) || math.IsInf(o, 0) {
			return fmt.Errorf("%w: Voxelize: origin %v must be finite", ErrOutOfRange, opt.Origin)
		}
	}
	if opt.Extent != (Extent{}) {
		if err := opt.Extent.Validate(); err != nil {
			return fmt.Errorf("sparse: Voxelize: %w", err)
		}
	}
	return nil
}

// voxelOf returns the voxel (b, x, y, z) of point i, whether it is kept,
// and a non-empty reason when the input is an error.
func voxelOf[T Float](pt []T, i int, opt *VoxelizeOptions, given bool) (v [4]int32, keep bool, reason string) {
	if opt.Batch != nil {
		v[0] = opt.Batch[i]
		if v[0] < 0 {
			return v, false, fmt.Sprintf("point %d has negative batch index %d", i, v[0])
		}
	}
	inside := true
	for a := range 3 {
		x := float64(pt[a])
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return v, false, fmt.Sprintf("point %d (%v, %v, %v) is not finite", i, pt[0], pt[1], pt[2])
		}
		f := math.Floor((x - opt.Origin[a]) / opt.VoxelSize[a])
		switch {
		case f < 0 || f > math.MaxInt32:
			inside = false
		default:
			v[a+1] = int32(f)
		}
	}
	if inside && given {
		inside = opt.Extent.Contains(int(v[0]), int(v[1]), int(v[2]), int(v[3]))
	}
	if !inside && !opt.DropOutside {
		where := "has a negative voxel coordinate or one past 2^31 − 1"
		if given {
			where = fmt.Sprintf("is outside %v", opt.Extent)
		}
		return v, false, fmt.Sprintf("point %d (%v, %v, %v) in batch %d falls in a voxel that %s (set DropOutside to drop such points)", i, pt[0], pt[1], pt[2], v[0], where)
	}
	return v, inside, ""
}

// meanPool averages the feature rows of each voxel's points. Voxel v owns
// the points kept[order[starts[v]:starts[v+1]]] (kept nil: the identity),
// in increasing point order
// (the sort is stable); each voxel is summed by one goroutine in that
// order, so the result does not depend on GOMAXPROCS.
func meanPool[T Float](x []T, c int, kept, order, starts []int32) []T {
	m := len(starts) - 1
	out := make([]T, m*c)
	if c == 0 {
		return out
	}
	grain := max(1, voxelChunk/c)
	fixedRanges(m, grain, func(lo, hi int) {
		acc := make([]float64, c)
		for v := lo; v < hi; v++ {
			clear(acc)
			for _, k := range order[starts[v]:starts[v+1]] {
				pt := int(k)
				if kept != nil {
					pt = int(kept[k])
				}
				row := x[pt*c : pt*c+c]
				for j, val := range row {
					acc[j] += float64(val)
				}
			}
			n := float64(starts[v+1] - starts[v])
			dst := out[v*c : v*c+c]
			for j := range dst {
				dst[j] = T(acc[j] / n)
			}
		}
	})
	return out
}
