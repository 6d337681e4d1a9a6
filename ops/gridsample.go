package ops

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/flexgemm-go/flexgemm/grad"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

var (
	_ gorgonia.Op   = gridSampleOp{}
	_ gorgonia.SDOp = gridSampleOp{}
	_ gorgonia.ADOp = gridSampleOp{}
)

// GridSample3d samples the sparse voxel features feats at query points, as
// FlexGEMM's grid_sample_3d: feats [N, C] holds the features of the voxels
// coords (flat [N, 4] rows of batch, x, y, z inside ext, row r of feats
// belonging to coords row r); points [B·L, 3] are the queries in voxel
// units (voxel (x, y, z) covers [x, x+1)×[y, y+1)×[z, z+1)), L per batch
// with B = ext.Batch; the result is [B·L, C]. mode is sparse.Trilinear
// (blend of the 8 surrounding voxels, renormalised over the present ones)
// or sparse.Nearest; see sparse.NewSamplePlan for the exact rules.
//
// The node is differentiable with respect to feats and to points (the
// exact derivative of the renormalised trilinear blend; zero for Nearest).
// The sampling plan is rebuilt only when the points' values change, and
// is shared by the forward and backward nodes. coords is copied. feats and
// points may have different float dtypes; the result has feats' dtype.
func GridSample3d(feats, points *gorgonia.Node, coords []int32, ext grid.Extent, mode sparse.SampleMode) (*gorgonia.Node, error) {
	const name = "GridSample3d"
	if err := checkNodes(name, []string{"feats", "points"}, feats, points); err != nil {
		return nil, err
	}
	dt, err := checkFloatNodes(name, []string{"feats"}, feats)
	if err != nil {
		return nil, err
	}
	if _, err := checkFloatNodes(name, []string{"points"}, points); err != nil {
		return nil, err
	}
	s, err := grad.NewSampleGrid(coords, ext, mode)
	if err != nil {
		return nil, fmt.Errorf("ops.%s: %w", name, err)
	}
	op := gridSampleOp{s: s, dt: dt}
	if _, err := op.InferShape(feats.Shape(), points.Shape()); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, feats, points)
}

// gridSampleOp samples feats [N, C] at points [M, 3] into [M, C].
type gridSampleOp struct {
	s  *grad.SampleGrid
	dt tensor.Dtype
}

func (op gridSampleOp) Arity() int { return 2 }

// Type returns a fresh function type: feats and the result share dtype a,
// the points have dtype p (not b: gorgonia's inferNodeType names the
// result type variable 'b', so an op type must not use it).
func (op gridSampleOp) Type() hm.Type {
	a, b := hm.TypeVariable('a'), hm.TypeVariable('p') // not 'b': gorgonia's inferNodeType uses 'b' for the result
	return hm.NewFnType(gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 2, Of: b}, gorgonia.TensorType{Dims: 2, Of: a})
}

func (op gridSampleOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	const name = "GridSample3d"
	s, err := inputShapes("ops."+name, 2, ds)
	if err != nil {
		return nil, err
	}
	feats, points := s[0], s[1]
	if len(feats) != 2 || feats[0] != op.s.Voxels() {
		return nil, shapeErr(name, "feats", feats, fmt.Sprintf("[%d, C] (one row per coordinate)", op.s.Voxels()))
	}
	if err := op.s.CheckPointsShape("ops."+name, points); err != nil {
		return nil, err
	}
	return tensor.Shape{points[0], feats[1]}, nil
}

// plan returns the sampling plan of a points value, and feats viewed as a
// matrix.
func (op gridSampleOp) operands(fv, pv gorgonia.Value) (*sparse.SamplePlan, sparse.Matrix, error) {
	ps, fs := pv.Shape(), fv.Shape()
	if err := op.s.CheckPointsShape("ops.GridSample3d", ps); err != nil {
		return nil, sparse.Matrix{}, err
	}
	if len(fs) != 2 {
		return nil, sparse.Matrix{}, shapeErr("GridSample3d", "feats", fs, "[N, C]")
	}
	points, err := valueMatrix(pv, "points", ps[0], 3)
	if err != nil {
		return nil, sparse.Matrix{}, err
	}
	feats, err := valueMatrix(fv, "feats", op.s.Voxels(), fs[1])
	if err != nil {
		return nil, sparse.Matrix{}, err
	}
	p, err := op.s.Plan(points)
	if err != nil {
		return nil, sparse.Matrix{}, err
	}
	return p, feats, nil
}

func (op gridSampleOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops.GridSample3d", 2, len(vs)); err != nil {
		return nil, err
	}
	p, feats, err := op.operands(vs[0], vs[1])
	if err != nil {
		return nil, err
	}
	out, err := sparse.GridSample(p, feats)
	if err != nil {
		return nil, err
	}
	return matrixDense(out, out.Rows, out.Cols)
}

func (op gridSampleOp) ReturnsPtr() bool      { return false }
func (op gridSampleOp) CallsExtern() bool     { return false }
func (op gridSampleOp) OverwritesInput() int  { return -1 }
func (op gridSampleOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op gridSampleOp) Hashcode() uint32      { return hashOp(op) }
func (op gridSampleOp) String() string        { return fmt.Sprintf("GridSample3d{%v %v}", op.s, op.dt) }

func (op gridSampleOp) DiffWRT(n int) []bool { return allTrue(n) }

// SymDiff returns grad.GridSampleFeatGrad and grad.GridSamplePointGrad
// nodes sharing this node's sampling plan.
func (op gridSampleOp) SymDiff(inputs gorgonia.Nodes, _, dy *gorgonia.Node) (gorgonia.Nodes, error) {
	if err := checkArity("ops.GridSample3d", 2, len(inputs)); err != nil {
		return nil, err
	}
	dFeats, err := grad.GridSampleFeatGrad(inputs[1], dy, op.s)
	if err != nil {
		return nil, err
	}
	dPoints, err := grad.GridSamplePointGrad(inputs[0], inputs[1], dy, op.s)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{dFeats, dPoints}, nil
}

// DoDiff accumulates the gradients of feats and points in place, for the
// LispMachine.
func (op gridSampleOp) DoDiff(_ gorgonia.ExecutionContext, inputs gorgonia.Nodes, output *gorgonia.Node) error {
	if err := checkArity("ops.GridSample3d", 2, len(inputs)); err != nil {
		return err
	}
	p, feats, err := op.operands(inputs[0].Value(), inputs[1].Value())
	if err != nil {
		return err
	}
	dy, err := outputGradMatrix(output, p.Queries(), feats.Cols)
	if err != nil {
		return err
	}
	dFeats, dPoints, err := sparse.GridSampleGrad(p, feats, dy)
	if err != nil {
		return err
	}
	if err := accumulateGrad(inputs[0], "feats", dFeats); err != nil {
		return err
	}
	if dPoints.IsZero() {
		return nil
	}
	return accumulateGrad(inputs[1], "points", dPoints)
}
