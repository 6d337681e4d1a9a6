package grad

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/flexgemm-go/flexgemm/internal/opkit"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The pooling backward ops are differentiable: with a bias-free average
// pool and an argmax gather they form a set closed under differentiation.
var (
	_ gorgonia.Op   = argmaxLinear{}
	_ gorgonia.SDOp = argmaxLinear{}
	_ gorgonia.ADOp = argmaxLinear{}
	_ gorgonia.Op   = avgPoolLinear{}
	_ gorgonia.SDOp = avgPoolLinear{}
	_ gorgonia.ADOp = avgPoolLinear{}
)

// MaxPoolGrad returns a node computing the gradient of a sparse max pool
// over m with respect to its input x,
//
//	dx[i, c] = Σ_{o : argmax[o, c] = i} dy[o, c]
//
// where argmax is recomputed from x exactly as sparse.Pool does (ties to
// the lowest tap). Shapes: x [m.NIn, C]; dy [m.NOut, C]; result
// [m.NIn, C]. The node is differentiable in dy; its derivative in x is
// zero almost everywhere and is not propagated.
func MaxPoolGrad(x, dy *gorgonia.Node, m *kmap.Map) (*gorgonia.Node, error) {
	const name = "MaxPoolGrad"
	if err := checkPoolArgs(name, m, []string{"x", "dy"}, x, dy); err != nil {
		return nil, err
	}
	op := argmaxLinear{poolBase: poolBase{m: m, dt: x.Dtype()}, adjoint: true}
	if _, err := op.InferShape(x.Shape(), dy.Shape()); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, x, dy)
}

// AvgPoolGrad returns a node computing the gradient of a sparse average
// pool over m,
//
//	dx[i, c] = Σ_{o, v : m.Nbr[o, v] = i} dy[o, c] / n_o
//
// with n_o the number of present neighbours of output o. Shapes: dy
// [m.NOut, C]; result [m.NIn, C]. The node is differentiable in dy.
func AvgPoolGrad(dy *gorgonia.Node, m *kmap.Map) (*gorgonia.Node, error) {
	const name = "AvgPoolGrad"
	if err := checkPoolArgs(name, m, []string{"dy"}, dy); err != nil {
		return nil, err
	}
	op := avgPoolLinear{poolBase: poolBase{m: m, dt: dy.Dtype()}, adjoint: true}
	if _, err := op.InferShape(dy.Shape()); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, dy)
}

func checkPoolArgs(name string, m *kmap.Map, names []string, nodes ...*gorgonia.Node) error {
	if m == nil {
		return fmt.Errorf("%w: grad.%s: nil kernel map", ErrNilInput, name)
	}
	if err := checkNodes(name, names, nodes...); err != nil {
		return err
	}
	_, err := checkFloatNodes(name, names, nodes...)
	return err
}

// poolBase holds what every pooling op of this file carries.
type poolBase struct {
	m  *kmap.Map
	dt tensor.Dtype
}

func (b poolBase) ReturnsPtr() bool     { return false }
func (b poolBase) CallsExtern() bool    { return false }
func (b poolBase) OverwritesInput() int { return -1 }
func (b poolBase) sig() string          { return fmt.Sprintf("%s %v", opkit.MapSignature(b.m), b.dt) }

// rowsShape checks that s is [rows, C] and returns C.
func rowsShape(op, arg string, s tensor.Shape, rows int, what string) (int, error) {
	if len(s) != 2 || s[0] != rows {
		return 0, shapeErr(op, arg, s, fmt.Sprintf("[%d, C] (%s)", rows, what))
	}
	return s[1], nil
}

// matrices views values as [rows_i, C] matrices, with C from the first.
func (b poolBase) matrices(vs []gorgonia.Value, names []string, rows []int) ([]sparse.Matrix, error) {
	out := make([]sparse.Matrix, len(vs))
	for i, v := range vs {
		s := v.Shape()
		if len(s) != 2 {
			return nil, fmt.Errorf("%w: %s has shape %v, want a matrix", sparse.ErrShape, names[i], s)
		}
		var err error
		if out[i], err = opkit.Matrix(v, names[i], rows[i], s[1]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// maxPoolGrad computes dx from x and dy by recomputing the argmax.
func (b poolBase) maxPoolGrad(xv, dyv gorgonia.Value) (sparse.Matrix, error) {
	ms, err := b.matrices([]gorgonia.Value{xv, dyv}, []string{"x", "dy"}, []int{b.m.NIn, b.m.NOut})
	if err != nil {
		return sparse.Matrix{}, err
	}
	_, argmax, err := sparse.Pool(b.m, ms[0], sparse.MaxPool)
	if err != nil {
		return sparse.Matrix{}, err
	}
	return sparse.PoolGrad(b.m, ms[1], argmax, sparse.MaxPool)
}

// argmaxGather returns out [NOut, C] with out[o, c] = g[argmax_x[o, c], c]
// (0 where an output has no neighbour), the adjoint of maxPoolGrad in dy.
func (b poolBase) argmaxGather(xv, gv gorgonia.Value) (sparse.Matrix, error) {
	ms, err := b.matrices([]gorgonia.Value{xv, gv}, []string{"x", "g"}, []int{b.m.NIn, b.m.NIn})
	if err != nil {
		return sparse.Matrix{}, err
	}
	_, argmax, err := sparse.Pool(b.m, ms[0], sparse.MaxPool)
	if err != nil {
		return sparse.Matrix{}, err
	}
	c := ms[1].Cols
	switch g := ms[1].Data.(type) {
	case []float32:
		return sparse.Matrix{Rows: b.m.NOut, Cols: c, Data: gatherArgmax(g, argmax.I32(), c)}, nil
	case sparse.Storage:
		return sparse.Matrix{}, fmt.Errorf("%w: second-order max-pool gradients of device tensors", ErrNotDifferentiable)
	default:
		return sparse.Matrix{Rows: b.m.NOut, Cols: c, Data: gatherArgmax(g.([]float64), argmax.I32(), c)}, nil
	}
}

func gatherArgmax[T float32 | float64](g []T, argmax []int32, c int) []T {
	out := make([]T, len(argmax))
	for j, i := range argmax {
		if i >= 0 {
			out[j] = g[int(i)*c+j%c]
		}
	}
	return out
}

func (b poolBase) avgPool(xv gorgonia.Value) (sparse.Matrix, error) {
	ms, err := b.matrices([]gorgonia.Value{xv}, []string{"x"}, []int{b.m.NIn})
	if err != nil {
		return sparse.Matrix{}, err
	}
	y, _, err := sparse.Pool(b.m, ms[0], sparse.AvgPool)
	return y, err
}

func (b poolBase) avgPoolGrad(dyv gorgonia.Value) (sparse.Matrix, error) {
	ms, err := b.matrices([]gorgonia.Value{dyv}, []string{"dy"}, []int{b.m.NOut})
	if err != nil {
		return sparse.Matrix{}, err
	}
	return sparse.PoolGrad(b.m, ms[0], sparse.Matrix{}, sparse.AvgPool)
}

func denseOf(m sparse.Matrix, err error) (gorgonia.Value, error) {
	if err != nil {
		return nil, err
	}
	return opkit.NewDense(m, m.Rows, m.Cols)
}

func matrixType(n int) hm.Type {
	a := hm.TypeVariable('a')
	ts := make(hm.Types, n+1)
	for i := range ts {
		ts[i] = gorgonia.TensorType{Dims: 2, Of: a}
	}
	return hm.NewFnType(ts...)
}

// argmaxLinear is one of the two maps of a sparse max pool over m that
// are linear in their second operand, for a fixed x [NIn, C]: the input
// gradient dy [NOut, C] → dx [NIn, C] (adjoint true, made by MaxPoolGrad),
// or the gather g [NIn, C] → [NOut, C] of g at the argmax rows of x
// (adjoint false; it appears only in second-order gradient graphs). Each
// is the other's gradient in that operand; neither has a gradient in x
// (piecewise constant).
type argmaxLinear struct {
	poolBase
	adjoint bool
}

// argmaxDims names the second operand and the result of an argmaxLinear.
type argmaxDims struct {
	argRows, outRows int
	argShape         string // the operand's shape in errors
	arg, name        string // the operand's and the op's names
}

func (op argmaxLinear) dims() argmaxDims {
	if op.adjoint {
		return argmaxDims{op.m.NOut, op.m.NIn, "([m.NOut, C])", "dy", "MaxPoolGrad"}
	}
	return argmaxDims{op.m.NIn, op.m.NOut, "(the shape of x)", "g", "ArgmaxGather"}
}

// apply computes the op on x and v.
func (op argmaxLinear) apply(x, v gorgonia.Value) (sparse.Matrix, error) {
	if op.adjoint {
		return op.maxPoolGrad(x, v)
	}
	return op.argmaxGather(x, v)
}

// transpose returns the other map of the pair.
func (op argmaxLinear) transpose() argmaxLinear {
	return argmaxLinear{poolBase: op.poolBase, adjoint: !op.adjoint}
}

func (op argmaxLinear) Arity() int    { return 2 }
func (op argmaxLinear) Type() hm.Type { return matrixType(2) }
func (op argmaxLinear) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	d := op.dims()
	s, err := opkit.Shapes("grad."+d.name, 2, ds)
	if err != nil {
		return nil, err
	}
	c, err := rowsShape(d.name, "x", s[0], op.m.NIn, "m.NIn")
	if err != nil {
		return nil, err
	}
	if len(s[1]) != 2 || s[1][0] != d.argRows || s[1][1] != c {
		return nil, shapeErr(d.name, d.arg, s[1], fmt.Sprintf("[%d, %d] %s", d.argRows, c, d.argShape))
	}
	return tensor.Shape{d.outRows, c}, nil
}
func (op argmaxLinear) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := opkit.CheckArity("grad."+op.dims().name, 2, len(vs)); err != nil {
		return nil, err
	}
	return denseOf(op.apply(vs[0], vs[1]))
}
func (op argmaxLinear) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op argmaxLinear) Hashcode() uint32      { return opkit.Hash(op) }
func (op argmaxLinear) String() string        { return op.dims().name + "{" + op.sig() + "}" }

// DiffWRT: linear in the second operand, piecewise constant in x.
func (op argmaxLinear) DiffWRT(int) []bool { return []bool{false, true} }
func (op argmaxLinear) SymDiff(in gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	d, err := gorgonia.ApplyOp(op.transpose(), in[0], g)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{nil, d}, nil
}
func (op argmaxLinear) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, out *gorgonia.Node) error {
	gv, err := out.Grad()
	if err != nil {
		return err
	}
	d, err := op.transpose().apply(in[0].Value(), gv)
	if err != nil {
		return err
	}
	return opkit.AccumulateGrad(in[1], op.dims().arg, d)
}

// avgPoolLinear is one of the two linear maps of a sparse average pool
// over m: the input gradient dy [NOut, C] → dx [NIn, C] (adjoint true,
// made by AvgPoolGrad), or the pool itself x [NIn, C] → [NOut, C] (adjoint
// false; it appears only in second-order gradient graphs, users pool with
// package ops). Each is the other's gradient.
type avgPoolLinear struct {
	poolBase
	adjoint bool
}

// avgPoolDims names the operand and result of an avgPoolLinear.
type avgPoolDims struct {
	inRows, outRows int
	inWhat          string // where inRows comes from, for errors
	arg, name       string // the operand's and the op's names
}

func (op avgPoolLinear) dims() avgPoolDims {
	if op.adjoint {
		return avgPoolDims{op.m.NOut, op.m.NIn, "m.NOut", "dy", "AvgPoolGrad"}
	}
	return avgPoolDims{op.m.NIn, op.m.NOut, "m.NIn", "x", "AvgPool"}
}

// apply computes the op on v.
func (op avgPoolLinear) apply(v gorgonia.Value) (sparse.Matrix, error) {
	if op.adjoint {
		return op.avgPoolGrad(v)
	}
	return op.avgPool(v)
}

func (op avgPoolLinear) Arity() int    { return 1 }
func (op avgPoolLinear) Type() hm.Type { return matrixType(1) }
func (op avgPoolLinear) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	d := op.dims()
	s, err := opkit.Shapes("grad."+d.name, 1, ds)
	if err != nil {
		return nil, err
	}
	c, err := rowsShape(d.name, d.arg, s[0], d.inRows, d.inWhat)
	if err != nil {
		return nil, err
	}
	return tensor.Shape{d.outRows, c}, nil
}
func (op avgPoolLinear) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := opkit.CheckArity("grad."+op.dims().name, 1, len(vs)); err != nil {
		return nil, err
	}
	return denseOf(op.apply(vs[0]))
}
func (op avgPoolLinear) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op avgPoolLinear) Hashcode() uint32      { return opkit.Hash(op) }
func (op avgPoolLinear) String() string {
	if op.adjoint {
		return "AvgPoolGrad{" + op.sig() + "}"
	}
	return "GradAvgPool{" + op.sig() + "}"
}
func (op avgPoolLinear) DiffWRT(int) []bool { return []bool{true} }

// transpose returns the other map of the pair.
func (op avgPoolLinear) transpose() avgPoolLinear {
	return avgPoolLinear{poolBase: op.poolBase, adjoint: !op.adjoint}
}
func (op avgPoolLinear) SymDiff(_ gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	d, err := gorgonia.ApplyOp(op.transpose(), g)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{d}, nil
}
func (op avgPoolLinear) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, out *gorgonia.Node) error {
	gv, err := out.Grad()
	if err != nil {
		return err
	}
	d, err := op.transpose().apply(gv)
	if err != nil {
		return err
	}
	return opkit.AccumulateGrad(in[0], op.dims().arg, d)
}
