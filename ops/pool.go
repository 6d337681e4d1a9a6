package ops

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/flexgemm-go/flexgemm/grad"
	"github.com/flexgemm-go/flexgemm/internal/opkit"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

var (
	_ gorgonia.Op   = poolOp{}
	_ gorgonia.SDOp = poolOp{}
	_ gorgonia.ADOp = poolOp{}
)

// MaxPool3d max-pools x over the kernel map m, normally a strided map
// (kmap.NewStrided with kernel 2, stride 2):
//
//	y[o, c] = max_{v : i = m.Nbr[o, v] ≥ 0} x[i, c]
//
// Ties go to the lowest tap; an output with no neighbour gets 0 (see
// sparse.Pool). Shapes: x [m.NIn, C] float32 or float64; result
// [m.NOut, C]. The gradient flows to the maximal input of every output
// and channel.
func MaxPool3d(x *gorgonia.Node, m *kmap.Map) (*gorgonia.Node, error) {
	return pool3d("MaxPool3d", x, m, sparse.MaxPool)
}

// AvgPool3d average-pools x over the kernel map m:
//
//	y[o, c] = (1/n_o) Σ_{v : i = m.Nbr[o, v] ≥ 0} x[i, c]
//
// with n_o the number of present neighbours of output o (absent sites do
// not count). Shapes: x [m.NIn, C] float32 or float64; result [m.NOut, C].
func AvgPool3d(x *gorgonia.Node, m *kmap.Map) (*gorgonia.Node, error) {
	return pool3d("AvgPool3d", x, m, sparse.AvgPool)
}

func pool3d(name string, x *gorgonia.Node, m *kmap.Map, mode sparse.PoolMode) (*gorgonia.Node, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: ops.%s: nil kernel map", ErrNilInput, name)
	}
	if err := checkNodes(name, []string{"x"}, x); err != nil {
		return nil, err
	}
	dt, err := checkFloatNodes(name, []string{"x"}, x)
	if err != nil {
		return nil, err
	}
	op := poolOp{m: m, mode: mode, dt: dt}
	if _, err := op.InferShape(x.Shape()); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, x)
}

// poolOp pools x [NIn, C] into [NOut, C] over one kernel map.
type poolOp struct {
	m    *kmap.Map
	mode sparse.PoolMode
	dt   tensor.Dtype
}

func (op poolOp) name() string {
	if op.mode == sparse.MaxPool {
		return "MaxPool3d"
	}
	return "AvgPool3d"
}

func (op poolOp) Arity() int { return 1 }

// Type returns a fresh function type on every call.
func (op poolOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 2, Of: a})
}

func (op poolOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops."+op.name(), 1, ds)
	if err != nil {
		return nil, err
	}
	x := s[0]
	if len(x) != 2 || x[0] != op.m.NIn {
		return nil, shapeErr(op.name(), "x", x, fmt.Sprintf("[%d, C] ([m.NIn, C])", op.m.NIn))
	}
	return tensor.Shape{op.m.NOut, x[1]}, nil
}

func (op poolOp) input(v gorgonia.Value) (sparse.Matrix, error) {
	s := v.Shape()
	if len(s) != 2 {
		return sparse.Matrix{}, shapeErr(op.name(), "x", s, "[m.NIn, C]")
	}
	return valueMatrix(v, "x", op.m.NIn, s[1])
}

func (op poolOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops."+op.name(), 1, len(vs)); err != nil {
		return nil, err
	}
	x, err := op.input(vs[0])
	if err != nil {
		return nil, err
	}
	y, _, err := sparse.Pool(op.m, x, op.mode)
	if err != nil {
		return nil, err
	}
	return matrixDense(y, op.m.NOut, x.Cols)
}

func (op poolOp) ReturnsPtr() bool      { return false }
func (op poolOp) CallsExtern() bool     { return false }
func (op poolOp) OverwritesInput() int  { return -1 }
func (op poolOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op poolOp) Hashcode() uint32      { return hashOp(op) }

// String implements fmt.Stringer for poolOp.
func (op poolOp) String() string {
	return fmt.Sprintf("%s{%s %v}", op.name(), opkit.MapSignature(op.m), op.dt)
}

func (op poolOp) DiffWRT(n int) []bool { return allTrue(n) }

// SymDiff returns grad.MaxPoolGrad(x, dy) or grad.AvgPoolGrad(dy).
func (op poolOp) SymDiff(inputs gorgonia.Nodes, _, dy *gorgonia.Node) (gorgonia.Nodes, error) {
	if err := checkArity("ops."+op.name(), 1, len(inputs)); err != nil {
		return nil, err
	}
	var dx *gorgonia.Node
	var err error
	if op.mode == sparse.MaxPool {
		dx, err = grad.MaxPoolGrad(inputs[0], dy, op.m)
	} else {
		dx, err = grad.AvgPoolGrad(dy, op.m)
	}
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{dx}, nil
}

// DoDiff accumulates the gradient of x in place, for the LispMachine.
func (op poolOp) DoDiff(_ gorgonia.ExecutionContext, inputs gorgonia.Nodes, output *gorgonia.Node) error {
	if err := checkArity("ops."+op.name(), 1, len(inputs)); err != nil {
		return err
	}
	x, err := op.input(inputs[0].Value())
	if err != nil {
		return err
	}
	dy, err := outputGradMatrix(output, op.m.NOut, x.Cols)
	if err != nil {
		return err
	}
	var argmax sparse.Matrix
	if op.mode == sparse.MaxPool {
		if _, argmax, err = sparse.Pool(op.m, x, op.mode); err != nil {
			return err
		}
	}
	dx, err := sparse.PoolGrad(op.m, dy, argmax, op.mode)
	if err != nil {
		return err
	}
	return accumulateGrad(inputs[0], "x", dx)
}
