package sparse

import (
	"errors"
	"fmt"
	"math"

	"github.com/flexgemm-go/flexgemm/sparse/cpu"
	"github.com/flexgemm-go/flexgemm/sparse/hash"
)

// ErrNotFinite reports a NaN or infinite value where a finite one is
// required, such as a query point of GridSample.
var ErrNotFinite = errors.New("sparse: value is not finite")

// SampleMode selects how GridSample interpolates.
type SampleMode int

// The sampling modes, with FlexGEMM's grid_sample_3d semantics.
const (
	// Trilinear blends the 8 voxels around a query, renormalised over the
	// voxels that exist (FlexGEMM's default).
	Trilinear SampleMode = iota
	// Nearest takes the voxel that contains the query.
	Nearest
)

// String implements fmt.Stringer for SampleMode.
func (s SampleMode) String() string {
	switch s {
	case Trilinear:
		return "trilinear"
	case Nearest:
		return "nearest"
	}
	return fmt.Sprintf("SampleMode(%d)", int(s))
}

// Valid reports whether s is a known sampling mode.
func (s SampleMode) Valid() error {
	if s != Trilinear && s != Nearest {
		return fmt.Errorf("%w: sampling mode %d", ErrMode, int(s))
	}
	return nil
}

// SampleWeightFloor is the smallest divisor of the trilinear blend:
// out = Σ w_c·f_c / max(Σ w_c, SampleWeightFloor).
const SampleWeightFloor = cpu.WeightFloor

// SamplePlan is the reusable part of a grid sample: for every query point,
// the feature rows it reads and their weights. Build it once with
// NewSamplePlan and use it for GridSample and GridSampleGrad with any
// features of the same voxels. A plan is immutable and safe for concurrent
// use. It lives in host memory; a device engine uploads its tables
// (Indices, Weights, Points).
type SamplePlan struct {
	p           *cpu.SamplePlan
	pointsDType DType
	perBatch    int
}

// NewSamplePlan plans sampling the sparse voxel grid coords (flat [N, 4],
// columns batch, x, y, z, inside ext, no duplicates) at the query points
// [B·L, 3] (float32 or float64, host), with L = perBatch: query row m
// belongs to batch m / L, so B must equal ext.Batch. This is FlexGEMM's
// grid [B, L, 3] flattened.
//
// Points are in voxel units: voxel (x, y, z) covers [x, x+1) × [y, y+1) ×
// [z, z+1), its centre is at +0.5.
//
//   - Nearest reads voxel (trunc(q.x), trunc(q.y), trunc(q.z)), truncating
//     toward zero like C's (int) cast (so −0.5 reads voxel 0); a query whose
//     voxel is out of bounds or inactive gets 0.
//   - Trilinear reads the 8 corners c = floor(q − 0.5) + {0,1}³ with
//     w_c = Π_axes (1 − |q − c − 0.5|), 0 for corners out of bounds or
//     inactive, and returns Σ w_c·f_c / max(Σ w_c, SampleWeightFloor): the
//     blend is renormalised over the present corners and is 0 if none is.
//
// Points must be finite (ErrNotFinite names the first bad one). M = 0
// queries (perBatch may then be 0) and N = 0 voxels are valid.
func NewSamplePlan(coords []int32, ext Extent, points Matrix, perBatch int, mode SampleMode) (*SamplePlan, error) {
	if err := mode.Valid(); err != nil {
		return nil, err
	}
	if err := ext.Validate(); err != nil {
		return nil, fmt.Errorf("sparse: NewSamplePlan: %w", err)
	}
	if len(coords)%4 != 0 {
		return nil, fmt.Errorf("%w: NewSamplePlan: coordinate array of length %d is not [N, 4]", ErrShape, len(coords))
	}
	if err := checkRange(coords, ext); err != nil {
		return nil, err
	}
	if err := checkMatrix("NewSamplePlan", "points", points, -1, 3); err != nil {
		return nil, err
	}
	M := points.Rows
	if perBatch < 0 || (M > 0 && perBatch == 0) {
		return nil, fmt.Errorf("%w: NewSamplePlan: %d points per batch", ErrShape, perBatch)
	}
	if M > 0 && (M%perBatch != 0 || M/perBatch != ext.Batch) {
		return nil, fmt.Errorf("%w: NewSamplePlan: %d points are not %d batches of %d (the extent's batch count)", ErrShape, M, ext.Batch, perBatch)
	}
	if int64(M)*8 > math.MaxInt32 {
		return nil, fmt.Errorf("%w: NewSamplePlan: %d points overflow 32-bit corner indices", ErrIndexOverflow, M)
	}
	pts, dt, err := finitePoints(points)
	if err != nil {
		return nil, err
	}
	index, err := hash.FromCoords(coords, ext)
	if err != nil {
		if dup, ok := hash.AsDuplicate(err); ok {
			r := int(dup.Second)
			c := coords[4*r : 4*r+4]
			return nil, fmt.Errorf("%w: NewSamplePlan: rows %d and %d are both (%d, %d, %d, %d)", ErrDuplicate, dup.First, dup.Second, c[0], c[1], c[2], c[3])
		}
		return nil, fmt.Errorf("sparse: NewSamplePlan: %w", err)
	}
	cm := cpu.Trilinear
	if mode == Nearest {
		cm = cpu.Nearest
	}
	p := cpu.NewSamplePlan(index, len(coords)/4, ext, pts, perBatch, cm)
	return &SamplePlan{p: p, pointsDType: dt, perBatch: perBatch}, nil
}

// finitePoints returns a float64 copy of a host float point matrix, or an
// error naming the first NaN or infinite coordinate.
func finitePoints(points Matrix) ([]float64, DType, error) {
	dt, _ := points.DType()
	if dt != Float32 && dt != Float64 {
		return nil, dt, fmt.Errorf("%w: NewSamplePlan: points are %v, want host float32 or float64", ErrDType, dt)
	}
	pts, err := points.Float64s()
	if err != nil {
		return nil, dt, err
	}
	for j, v := range pts {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, dt, fmt.Errorf("%w: NewSamplePlan: point %d has coordinate %c = %v", ErrNotFinite, j/3, "xyz"[j%3], v)
		}
	}
	return pts, dt, nil
}

// Mode returns the sampling mode.
func (p *SamplePlan) Mode() SampleMode {
	if p.p.Mode == cpu.Nearest {
		return Nearest
	}
	return Trilinear
}

// Queries returns the number of query points M.
func (p *SamplePlan) Queries() int { return p.p.M }

// Voxels returns the number of feature rows N the plan reads.
func (p *SamplePlan) Voxels() int { return p.p.N }

// PerBatch returns the number of query points per batch L.
func (p *SamplePlan) PerBatch() int { return p.perBatch }

// Corners returns the number of corners K read per query: 8 for
// Trilinear, 1 for Nearest.
func (p *SamplePlan) Corners() int { return p.p.K() }

// Indices returns the [M, K] feature rows read by each query, −1 where a
// corner is absent. The slice belongs to the plan and must not be changed.
func (p *SamplePlan) Indices() []int32 { return p.p.Idx }

// Weights returns the [M, K] final (renormalised) corner weights, 0 where
// a corner is absent. The slice belongs to the plan and must not be changed.
func (p *SamplePlan) Weights() []float64 { return p.p.W }

// Points returns the [M, 3] query points as float64 (nil for Nearest,
// which does not need them). The slice belongs to the plan.
func (p *SamplePlan) Points() []float64 { return p.p.Points }

// PointsDType returns the dtype of the points the plan was built from, the
// dtype of the point gradient.
func (p *SamplePlan) PointsDType() DType { return p.pointsDType }

// GridSample samples feats [N, C] (the features of the plan's voxels, row r
// of coords) at the plan's query points and returns [M, C] = [B·L, C]
// (FlexGEMM's [B, L, C] flattened) of feats' dtype:
//
//	out[m] = Σ_k W[m, k] · feats[Idx[m, k]]
//
// with the weights of NewSamplePlan.
func GridSample(p *SamplePlan, feats Matrix) (Matrix, error) {
	if p == nil || p.p == nil {
		return Matrix{}, fmt.Errorf("%w: GridSample: nil plan", ErrShape)
	}
	if err := checkMatrix("GridSample", "feats", feats, p.Voxels(), -1); err != nil {
		return Matrix{}, err
	}
	if err := floatDType("GridSample", "feats", feats); err != nil {
		return Matrix{}, err
	}
	e, err := sampleEngineFor(feats)
	if err != nil {
		return Matrix{}, err
	}
	return e.GridSampleForward(p, feats)
}

// GridSampleGrad returns the gradients of GridSample given dy [M, C]:
//
//   - dFeats [N, C] (feats' dtype): dFeats[r] = Σ W[m, k]·dy[m] over the
//     (query, corner) pairs that read row r, summed per row in a fixed
//     order (deterministic, no atomics);
//   - dPoints [M, 3] (the points' dtype), which FlexGEMM does not provide.
//     Nearest sampling is piecewise constant, so dPoints is 0. Trilinear
//     gives the exact derivative of the renormalised blend, including the
//     normalisation: with S = Σ w_c over present corners,
//     ∂L/∂q_a = Σ_c (∂w_c/∂q_a / S)·(dy·f_c − dy·out). Where a coordinate
//     lies exactly on a cell boundary (q_a − 0.5 an integer) the blend has
//     a kink and the derivative is the one-sided one for increasing q_a;
//     where S ≤ SampleWeightFloor (no present corner has weight, e.g. the
//     query is outside the grid) the blend is discontinuous and dPoints is
//     0 for that query.
//
// feats [N, C] is needed only for dPoints: pass the zero Matrix to skip
// it, and dPoints is then the zero Matrix.
func GridSampleGrad(p *SamplePlan, feats, dy Matrix) (dFeats, dPoints Matrix, err error) {
	if p == nil || p.p == nil {
		return Matrix{}, Matrix{}, fmt.Errorf("%w: GridSampleGrad: nil plan", ErrShape)
	}
	if err := checkMatrix("GridSampleGrad", "dy", dy, p.Queries(), -1); err != nil {
		return Matrix{}, Matrix{}, err
	}
	if err := floatDType("GridSampleGrad", "dy", dy); err != nil {
		return Matrix{}, Matrix{}, err
	}
	if feats.IsZero() {
		e, err := sampleEngineFor(dy)
		if err != nil {
			return Matrix{}, Matrix{}, err
		}
		return e.GridSampleGrad(p, Matrix{}, dy)
	}
	if err := checkMatrix("GridSampleGrad", "feats", feats, p.Voxels(), dy.Cols); err != nil {
		return Matrix{}, Matrix{}, err
	}
	if err := sameDType("GridSampleGrad", "dy", feats, dy); err != nil {
		return Matrix{}, Matrix{}, err
	}
	e, err := sampleEngineFor(feats, dy)
	if err != nil {
		return Matrix{}, Matrix{}, err
	}
	return e.GridSampleGrad(p, feats, dy)
}
