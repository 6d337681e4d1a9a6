package grad

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"slices"
	"sync"

	"github.com/chewxy/hm"
	"github.com/flexgemm-go/flexgemm/internal/opkit"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ErrNotDifferentiable reports an attempt to differentiate a backward op
// that has no derivative implemented (second-order grid-sample gradients).
var ErrNotDifferentiable = errors.New("grad: op is not differentiable")

var (
	_ gorgonia.Op   = sampleFeatGradOp{}
	_ gorgonia.SDOp = sampleFeatGradOp{}
	_ gorgonia.ADOp = sampleFeatGradOp{}
	_ gorgonia.Op   = samplePointGradOp{}
	_ gorgonia.SDOp = samplePointGradOp{}
	_ gorgonia.ADOp = samplePointGradOp{}
)

// SampleGrid is the voxel grid a grid sample reads from: coordinates
// (flat [N, 4] rows of batch, x, y, z inside an extent) and the sampling
// mode. It builds the sparse.SamplePlan of a set of query points and keeps
// the last one, so that the forward and backward nodes of one grid sample
// share it when they see the same points. A SampleGrid is safe for
// concurrent use.
type SampleGrid struct {
	coords []int32
	ext    grid.Extent
	mode   sparse.SampleMode
	sum    uint64 // FNV-64a of coords, for op hashes

	mu     sync.Mutex
	points []float64 // the points of plan, as float64
	pdt    sparse.DType
	plan   *sparse.SamplePlan
}

// NewSampleGrid validates and copies coords and returns the grid. It
// reports a coordinate array that is not [N, 4] or has rows outside ext, an
// invalid extent and an unknown mode (duplicate rows are reported when the
// first plan is built).
func NewSampleGrid(coords []int32, ext grid.Extent, mode sparse.SampleMode) (*SampleGrid, error) {
	if err := mode.Valid(); err != nil {
		return nil, fmt.Errorf("grad: NewSampleGrid: %w", err)
	}
	if err := ext.Validate(); err != nil {
		return nil, fmt.Errorf("%w: grad: NewSampleGrid: %w", sparse.ErrShape, err)
	}
	if len(coords)%4 != 0 {
		return nil, fmt.Errorf("%w: grad: NewSampleGrid: coordinate array of length %d is not [N, 4]", sparse.ErrShape, len(coords))
	}
	for r := 0; r < len(coords)/4; r++ {
		c := coords[4*r : 4*r+4]
		if !ext.Contains(int(c[0]), int(c[1]), int(c[2]), int(c[3])) {
			return nil, fmt.Errorf("%w: grad: NewSampleGrid: row %d %v is outside %v", sparse.ErrOutOfRange, r, c, ext)
		}
	}
	h := fnv.New64a()
	var buf [4]byte
	for _, v := range coords {
		buf[0], buf[1], buf[2], buf[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		h.Write(buf[:])
	}
	return &SampleGrid{coords: slices.Clone(coords), ext: ext, mode: mode, sum: h.Sum64()}, nil
}

// Voxels returns the number of voxels N.
func (s *SampleGrid) Voxels() int { return len(s.coords) / 4 }

// Extent returns the grid's extent.
func (s *SampleGrid) Extent() grid.Extent { return s.ext }

// Mode returns the sampling mode.
func (s *SampleGrid) Mode() sparse.SampleMode { return s.mode }

// String describes the grid by size, content checksum, extent and mode;
// ops put it in their hashes.
func (s *SampleGrid) String() string {
	return fmt.Sprintf("SampleGrid{n=%d sum=%016x %v %v}", s.Voxels(), s.sum, s.ext, s.mode)
}

// Plan returns the plan of sampling the grid at points [B·L, 3] (float32
// or float64), with B = the extent's batch count, reusing the previous
// plan when the points are unchanged.
func (s *SampleGrid) Plan(points sparse.Matrix) (*sparse.SamplePlan, error) {
	pts, err := points.Float64s()
	if err != nil {
		return nil, err
	}
	pdt, _ := points.DType()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plan != nil && s.pdt == pdt && slices.Equal(s.points, pts) {
		return s.plan, nil
	}
	perBatch := 0
	if points.Rows > 0 {
		if points.Rows%s.ext.Batch != 0 {
			return nil, fmt.Errorf("%w: grad: %d points are not %d batches of the same size", sparse.ErrShape, points.Rows, s.ext.Batch)
		}
		perBatch = points.Rows / s.ext.Batch
	}
	p, err := sparse.NewSamplePlan(s.coords, s.ext, points, perBatch, s.mode)
	if err != nil {
		return nil, err
	}
	s.plan, s.points, s.pdt = p, pts, pdt
	return p, nil
}

// CheckPointsShape reports whether points of shape s suit the grid:
// [M, 3] with M a multiple of the extent's batch count.
func (s *SampleGrid) CheckPointsShape(op string, ps tensor.Shape) error {
	if len(ps) != 2 || ps[1] != 3 || ps[0]%s.ext.Batch != 0 {
		return opkit.ShapeErr(op, "points", ps, fmt.Sprintf("[B·L, 3] with B = %d (the extent's batch count)", s.ext.Batch))
	}
	return nil
}

// GridSampleFeatGrad returns a node computing the gradient of a grid
// sample with respect to the voxel features: dFeats [N, C] from the query
// points [M, 3] and dy [M, C] (see sparse.GridSampleGrad). The node cannot
// itself be differentiated.
func GridSampleFeatGrad(points, dy *gorgonia.Node, s *SampleGrid) (*gorgonia.Node, error) {
	const name = "GridSampleFeatGrad"
	if s == nil {
		return nil, fmt.Errorf("%w: grad.%s: nil SampleGrid", ErrNilInput, name)
	}
	if err := checkNodes(name, []string{"points", "dy"}, points, dy); err != nil {
		return nil, err
	}
	if _, err := checkFloatNodes(name, []string{"points"}, points); err != nil {
		return nil, err
	}
	dt, err := checkFloatNodes(name, []string{"dy"}, dy)
	if err != nil {
		return nil, err
	}
	op := sampleFeatGradOp{sampleBase{s: s, dt: dt}}
	if _, err := op.InferShape(points.Shape(), dy.Shape()); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, points, dy)
}

// GridSamplePointGrad returns a node computing the gradient of a grid
// sample with respect to the query points: dPoints [M, 3] (the points'
// dtype) from feats [N, C], points [M, 3] and dy [M, C] (see
// sparse.GridSampleGrad; zero for Nearest). The node cannot itself be
// differentiated.
func GridSamplePointGrad(feats, points, dy *gorgonia.Node, s *SampleGrid) (*gorgonia.Node, error) {
	const name = "GridSamplePointGrad"
	if s == nil {
		return nil, fmt.Errorf("%w: grad.%s: nil SampleGrid", ErrNilInput, name)
	}
	if err := checkNodes(name, []string{"feats", "points", "dy"}, feats, points, dy); err != nil {
		return nil, err
	}
	if _, err := checkFloatNodes(name, []string{"points"}, points); err != nil {
		return nil, err
	}
	dt, err := checkFloatNodes(name, []string{"feats", "dy"}, feats, dy)
	if err != nil {
		return nil, err
	}
	op := samplePointGradOp{sampleBase{s: s, dt: dt}}
	if _, err := op.InferShape(feats.Shape(), points.Shape(), dy.Shape()); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, feats, points, dy)
}

type sampleBase struct {
	s  *SampleGrid
	dt tensor.Dtype
}

func (b sampleBase) ReturnsPtr() bool     { return false }
func (b sampleBase) CallsExtern() bool    { return false }
func (b sampleBase) OverwritesInput() int { return -1 }
func (b sampleBase) DiffWRT(n int) []bool { return opkit.AllTrue(n) }
func (b sampleBase) sig() string          { return fmt.Sprintf("%v %v", b.s, b.dt) }

func (b sampleBase) notDifferentiable(op string) error {
	return fmt.Errorf("%w: second-order gradients through grad.%s are not supported", ErrNotDifferentiable, op)
}

func (b sampleBase) lispDiff(out *gorgonia.Node, op string) error {
	gv, err := out.Grad()
	if err != nil {
		return err
	}
	d, err := opkit.Dense(gv, "output gradient")
	if err != nil {
		return err
	}
	data, err := opkit.Data(d, "output gradient")
	if err != nil {
		return err
	}
	switch g := data.(type) {
	case []float32:
		if slices.ContainsFunc(g, func(v float32) bool { return v != 0 }) {
			return b.notDifferentiable(op)
		}
	case []float64:
		if slices.ContainsFunc(g, func(v float64) bool { return v != 0 }) {
			return b.notDifferentiable(op)
		}
	}
	return nil
}

// plan returns the plan for a points value.
func (b sampleBase) plan(pv gorgonia.Value) (*sparse.SamplePlan, error) {
	ps := pv.Shape()
	if err := b.s.CheckPointsShape("grad.GridSample", ps); err != nil {
		return nil, err
	}
	points, err := opkit.Matrix(pv, "points", ps[0], 3)
	if err != nil {
		return nil, err
	}
	return b.s.Plan(points)
}

// grads computes (dFeats, dPoints) of a grid sample; feats may be nil to
// skip dPoints.
func (b sampleBase) grads(featsV, pointsV, dyV gorgonia.Value) (dFeats, dPoints sparse.Matrix, err error) {
	p, err := b.plan(pointsV)
	if err != nil {
		return
	}
	ds := dyV.Shape()
	if len(ds) != 2 {
		err = opkit.ShapeErr("grad.GridSample", "dy", ds, "[M, C]")
		return
	}
	dy, err := opkit.Matrix(dyV, "dy", p.Queries(), ds[1])
	if err != nil {
		return
	}
	var feats sparse.Matrix
	if featsV != nil {
		if feats, err = opkit.Matrix(featsV, "feats", p.Voxels(), ds[1]); err != nil {
			return
		}
	}
	return sparse.GridSampleGrad(p, feats, dy)
}

// sampleFeatGradOp computes dFeats [N, C] from points [M, 3] and dy [M, C].
type sampleFeatGradOp struct{ sampleBase }

func (op sampleFeatGradOp) Arity() int { return 2 }
func (op sampleFeatGradOp) Type() hm.Type {
	a, b := hm.TypeVariable('a'), hm.TypeVariable('p') // not 'b': gorgonia's inferNodeType uses 'b' for the result
	return hm.NewFnType(gorgonia.TensorType{Dims: 2, Of: b}, gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 2, Of: a})
}
func (op sampleFeatGradOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	const name = "GridSampleFeatGrad"
	s, err := opkit.Shapes("grad."+name, 2, ds)
	if err != nil {
		return nil, err
	}
	if err := op.s.CheckPointsShape("grad."+name, s[0]); err != nil {
		return nil, err
	}
	if len(s[1]) != 2 || s[1][0] != s[0][0] {
		return nil, shapeErr(name, "dy", s[1], fmt.Sprintf("[%d, C] ([M, C])", s[0][0]))
	}
	return tensor.Shape{op.s.Voxels(), s[1][1]}, nil
}
func (op sampleFeatGradOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := opkit.CheckArity("grad.GridSampleFeatGrad", 2, len(vs)); err != nil {
		return nil, err
	}
	dFeats, _, err := op.grads(nil, vs[0], vs[1])
	return denseOf(dFeats, err)
}
func (op sampleFeatGradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op sampleFeatGradOp) Hashcode() uint32      { return opkit.Hash(op) }
func (op sampleFeatGradOp) String() string        { return "GridSampleFeatGrad{" + op.sig() + "}" }
func (op sampleFeatGradOp) SymDiff(gorgonia.Nodes, *gorgonia.Node, *gorgonia.Node) (gorgonia.Nodes, error) {
	return nil, op.notDifferentiable("GridSampleFeatGrad")
}

// DoDiff fails unless the output gradient is zero (a node off the path to
// the cost), so that no second-order term is silently dropped.
func (op sampleFeatGradOp) DoDiff(_ gorgonia.ExecutionContext, _ gorgonia.Nodes, out *gorgonia.Node) error {
	return op.lispDiff(out, "GridSampleFeatGrad")
}

// samplePointGradOp computes dPoints [M, 3] from feats [N, C], points
// [M, 3] and dy [M, C].
type samplePointGradOp struct{ sampleBase }

func (op samplePointGradOp) Arity() int { return 3 }
func (op samplePointGradOp) Type() hm.Type {
	a, b := hm.TypeVariable('a'), hm.TypeVariable('p') // not 'b': gorgonia's inferNodeType uses 'b' for the result
	return hm.NewFnType(gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 2, Of: b}, gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 2, Of: b})
}
func (op samplePointGradOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	const name = "GridSamplePointGrad"
	s, err := opkit.Shapes("grad."+name, 3, ds)
	if err != nil {
		return nil, err
	}
	feats, points, dy := s[0], s[1], s[2]
	if len(feats) != 2 || feats[0] != op.s.Voxels() {
		return nil, shapeErr(name, "feats", feats, fmt.Sprintf("[%d, C] ([N, C], N = the grid's voxels)", op.s.Voxels()))
	}
	if err := op.s.CheckPointsShape("grad."+name, points); err != nil {
		return nil, err
	}
	if len(dy) != 2 || dy[0] != points[0] || dy[1] != feats[1] {
		return nil, shapeErr(name, "dy", dy, fmt.Sprintf("[%d, %d] ([M, C])", points[0], feats[1]))
	}
	return tensor.Shape{points[0], 3}, nil
}
func (op samplePointGradOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := opkit.CheckArity("grad.GridSamplePointGrad", 3, len(vs)); err != nil {
		return nil, err
	}
	_, dPoints, err := op.grads(vs[0], vs[1], vs[2])
	if err != nil {
		return nil, err
	}
	if dPoints.IsZero() {
		// No point gradient (e.g. Nearest): zeros of the points' dtype.
		m := vs[1].Shape()[0]
		if vs[1].Dtype() == tensor.Float32 {
			dPoints = sparse.Matrix{Rows: m, Cols: 3, Data: make([]float32, 3*m)}
		} else {
			dPoints = sparse.Matrix{Rows: m, Cols: 3, Data: make([]float64, 3*m)}
		}
	}
	return denseOf(dPoints, nil)
}
func (op samplePointGradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op samplePointGradOp) Hashcode() uint32      { return opkit.Hash(op) }
func (op samplePointGradOp) String() string        { return "GridSamplePointGrad{" + op.sig() + "}" }
func (op samplePointGradOp) SymDiff(gorgonia.Nodes, *gorgonia.Node, *gorgonia.Node) (gorgonia.Nodes, error) {
	return nil, op.notDifferentiable("GridSamplePointGrad")
}

// DoDiff fails unless the output gradient is zero (a node off the path to
// the cost), so that no second-order term is silently dropped.
func (op samplePointGradOp) DoDiff(_ gorgonia.ExecutionContext, _ gorgonia.Nodes, out *gorgonia.Node) error {
	return op.lispDiff(out, "GridSamplePointGrad")
}
