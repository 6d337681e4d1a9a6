package grad

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/flexgemm-go/flexgemm/internal/opkit"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Sentinel errors; shape and dtype problems wrap sparse.ErrShape and
// sparse.ErrDType. The same values are exported by package ops.
var (
	// ErrNilInput reports a nil node or kernel map.
	ErrNilInput = opkit.ErrNilInput
	// ErrOption reports an invalid option such as a negative split-K
	// (such errors also wrap sparse.ErrOptions).
	ErrOption = opkit.ErrOption
)

// The convolution backward ops are themselves differentiable (double
// backward): together with a bias-free forward convolution and a row
// broadcast they form a set closed under differentiation.
var (
	_ gorgonia.Op   = convInputGradOp{}
	_ gorgonia.SDOp = convInputGradOp{}
	_ gorgonia.ADOp = convInputGradOp{}
	_ gorgonia.Op   = convWeightGradOp{}
	_ gorgonia.SDOp = convWeightGradOp{}
	_ gorgonia.ADOp = convWeightGradOp{}
	_ gorgonia.Op   = biasGradOp{}
	_ gorgonia.SDOp = biasGradOp{}
	_ gorgonia.ADOp = biasGradOp{}
	_ gorgonia.Op   = convForwardOp{}
	_ gorgonia.SDOp = convForwardOp{}
	_ gorgonia.ADOp = convForwardOp{}
	_ gorgonia.Op   = rowBroadcastOp{}
	_ gorgonia.SDOp = rowBroadcastOp{}
	_ gorgonia.ADOp = rowBroadcastOp{}
)

// ConvInputGrad returns a node computing the gradient of a sparse
// convolution over m with respect to its input features,
//
//	dx[i, :] = Σ_v w[:, v, :]ᵀ · dy[Rev[i, v], :]
//
// Shapes: dy [m.NOut, Co]; w [Co, Kx, Ky, Kz, Ci] with (Kx, Ky, Kz) =
// m.Conv.Kernel; result [m.NIn, Ci]. opt is passed to sparse.ConvInputGrad.
// The node is differentiable in dy and w.
func ConvInputGrad(dy, w *gorgonia.Node, m *kmap.Map, opt sparse.ConvOptions) (*gorgonia.Node, error) {
	const name = "ConvInputGrad"
	if err := checkConvArgs(name, m, opt, []string{"dy", "weight"}, dy, w); err != nil {
		return nil, err
	}
	op := convInputGradOp{convBase{m: m, opt: opt, dt: dy.Dtype()}}
	if _, err := op.InferShape(dy.Shape(), w.Shape()); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, dy, w)
}

// ConvWeightGrad returns a node computing the gradient of a sparse
// convolution over m with respect to its weight,
//
//	dw[:, v, :] = Σ_{o : i = Nbr[o, v] ≥ 0} dy[o, :] ⊗ x[i, :]
//
// Shapes: x [m.NIn, Ci]; dy [m.NOut, Co]; result [Co, Kx, Ky, Kz, Ci] with
// (Kx, Ky, Kz) = m.Conv.Kernel. opt is passed to sparse.ConvWeightGrad.
// The node is differentiable in x and dy.
func ConvWeightGrad(x, dy *gorgonia.Node, m *kmap.Map, opt sparse.ConvOptions) (*gorgonia.Node, error) {
	const name = "ConvWeightGrad"
	if err := checkConvArgs(name, m, opt, []string{"x", "dy"}, x, dy); err != nil {
		return nil, err
	}
	op := convWeightGradOp{convBase{m: m, opt: opt, dt: x.Dtype()}}
	if _, err := op.InferShape(x.Shape(), dy.Shape()); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, x, dy)
}

// BiasGrad returns a node computing the gradient of a convolution's bias:
// the column sums of dy [N, Co], a [Co] vector. It is differentiable in dy.
func BiasGrad(dy *gorgonia.Node) (*gorgonia.Node, error) {
	const name = "BiasGrad"
	if err := checkNodes(name, []string{"dy"}, dy); err != nil {
		return nil, err
	}
	if _, err := checkFloatNodes(name, []string{"dy"}, dy); err != nil {
		return nil, err
	}
	op := biasGradOp{dt: dy.Dtype()}
	if _, err := op.InferShape(dy.Shape()); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, dy)
}

func checkConvArgs(name string, m *kmap.Map, opt sparse.ConvOptions, names []string, nodes ...*gorgonia.Node) error {
	if m == nil {
		return fmt.Errorf("%w: grad.%s: nil kernel map", ErrNilInput, name)
	}
	if err := checkNodes(name, names, nodes...); err != nil {
		return err
	}
	if _, err := checkFloatNodes(name, names, nodes...); err != nil {
		return err
	}
	return opkit.CheckConvOptions("grad."+name, opt)
}

// convBase holds what every convolution op of this file carries.
type convBase struct {
	m   *kmap.Map
	opt sparse.ConvOptions
	dt  tensor.Dtype
}

func (b convBase) ReturnsPtr() bool     { return false }
func (b convBase) CallsExtern() bool    { return false }
func (b convBase) OverwritesInput() int { return -1 }
func (b convBase) DiffWRT(n int) []bool { return opkit.AllTrue(n) }
func (b convBase) sig() string          { return fmt.Sprintf("%s %v", opkit.ConvSignature(b.m, b.opt), b.dt) }

// weightDims returns (Co, Ci) of a weight value or shape [Co, K…, Ci].
func weightDims(op string, s tensor.Shape) (co, ci int, err error) {
	if len(s) != 5 {
		return 0, 0, shapeErr(op, "weight", s, "[Co, Kx, Ky, Kz, Ci]")
	}
	return s[0], s[4], nil
}

// convForward, convInputGrad and convWeightGrad run the sparse kernels on
// Gorgonia values: x [NIn, Ci], w [Co, K…, Ci], dy [NOut, Co].
func (b convBase) convForward(xv, wv gorgonia.Value) (sparse.Matrix, error) {
	co, ci, err := weightDims("conv", wv.Shape())
	if err != nil {
		return sparse.Matrix{}, err
	}
	x, err := opkit.Matrix(xv, "x", b.m.NIn, ci)
	if err != nil {
		return sparse.Matrix{}, err
	}
	w, err := opkit.Matrix(wv, "weight", co, b.m.V()*ci)
	if err != nil {
		return sparse.Matrix{}, err
	}
	release, err := opkit.Harmonize(x, &w)
	if err != nil {
		return sparse.Matrix{}, err
	}
	defer release()
	return sparse.Conv(b.m, x, w, sparse.Matrix{}, b.opt)
}

func (b convBase) convInputGrad(dyv, wv gorgonia.Value) (sparse.Matrix, error) {
	co, ci, err := weightDims("ConvInputGrad", wv.Shape())
	if err != nil {
		return sparse.Matrix{}, err
	}
	dy, err := opkit.Matrix(dyv, "dy", b.m.NOut, co)
	if err != nil {
		return sparse.Matrix{}, err
	}
	w, err := opkit.Matrix(wv, "weight", co, b.m.V()*ci)
	if err != nil {
		return sparse.Matrix{}, err
	}
	release, err := opkit.Harmonize(dy, &w)
	if err != nil {
		return sparse.Matrix{}, err
	}
	defer release()
	return sparse.ConvInputGrad(b.m, dy, w, b.opt)
}

func (b convBase) convWeightGrad(xv, dyv gorgonia.Value) (sparse.Matrix, error) {
	xs, dys := xv.Shape(), dyv.Shape()
	if len(xs) != 2 || len(dys) != 2 {
		return sparse.Matrix{}, shapeErr("ConvWeightGrad", "x and dy", xs, "matrices")
	}
	x, err := opkit.Matrix(xv, "x", b.m.NIn, xs[1])
	if err != nil {
		return sparse.Matrix{}, err
	}
	dy, err := opkit.Matrix(dyv, "dy", b.m.NOut, dys[1])
	if err != nil {
		return sparse.Matrix{}, err
	}
	release, err := opkit.Harmonize(x, &dy)
	if err != nil {
		return sparse.Matrix{}, err
	}
	defer release()
	return sparse.ConvWeightGrad(b.m, x, dy, b.opt)
}

// weightDense wraps a [Co, V·Ci] result as [Co, Kx, Ky, Kz, Ci]; a
// weight-shaped result is a parameter gradient, kept in float32 on a
// device that computes in a narrower dtype.
func (b convBase) weightDense(dw sparse.Matrix) (*tensor.Dense, error) {
	dw, err := opkit.Master(dw)
	if err != nil {
		return nil, err
	}
	k := b.m.Conv.Kernel
	return opkit.NewDense(dw, dw.Rows, k[0], k[1], k[2], dw.Cols/b.m.V())
}

// convInputGradOp computes dx [NIn, Ci] from dy [NOut, Co] and w [Co, K…, Ci].
type convInputGradOp struct{ convBase }

func (op convInputGradOp) Arity() int { return 2 }

func (op convInputGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 5, Of: a}, gorgonia.TensorType{Dims: 2, Of: a})
}

func (op convInputGradOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	const name = "ConvInputGrad"
	s, err := opkit.Shapes("grad."+name, 2, ds)
	if err != nil {
		return nil, err
	}
	dy, w := s[0], s[1]
	if err := opkit.CheckWeight("grad."+name, op.m, w); err != nil {
		return nil, err
	}
	if len(dy) != 2 || dy[0] != op.m.NOut || dy[1] != w[0] {
		return nil, shapeErr(name, "dy", dy, fmt.Sprintf("[%d, %d] ([m.NOut, Co])", op.m.NOut, w[0]))
	}
	return tensor.Shape{op.m.NIn, w[4]}, nil
}

func (op convInputGradOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := opkit.CheckArity("grad.ConvInputGrad", 2, len(vs)); err != nil {
		return nil, err
	}
	dx, err := op.convInputGrad(vs[0], vs[1])
	if err != nil {
		return nil, err
	}
	return opkit.NewDense(dx, dx.Rows, dx.Cols)
}

func (op convInputGradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op convInputGradOp) Hashcode() uint32      { return opkit.Hash(op) }
func (op convInputGradOp) String() string        { return "ConvInputGrad{" + op.sig() + "}" }

// SymDiff: dx = Tᵀ(dy, w) is bilinear; its pullback of g [NIn, Ci] is
// d(dy) = Conv(g, w) and d(w) = ConvWeightGrad(g, dy).
func (op convInputGradOp) SymDiff(in gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	dDy, err := gorgonia.ApplyOp(convForwardOp(op), g, in[1])
	if err != nil {
		return nil, err
	}
	dW, err := gorgonia.ApplyOp(convWeightGradOp(op), g, in[0])
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{dDy, dW}, nil
}

func (op convInputGradOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, out *gorgonia.Node) error {
	gv, err := out.Grad()
	if err != nil {
		return err
	}
	dDy, err := op.convForward(gv, in[1].Value())
	if err != nil {
		return err
	}
	if err := opkit.AccumulateGrad(in[0], "dy", dDy); err != nil {
		return err
	}
	dW, err := op.convWeightGrad(gv, in[0].Value())
	if err != nil {
		return err
	}
	return opkit.AccumulateGrad(in[1], "weight", dW)
}

// convWeightGradOp computes dw [Co, K…, Ci] from x [NIn, Ci] and dy [NOut, Co].
type convWeightGradOp struct{ convBase }

func (op convWeightGradOp) Arity() int { return 2 }

func (op convWeightGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 5, Of: a})
}

func (op convWeightGradOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	const name = "ConvWeightGrad"
	s, err := opkit.Shapes("grad."+name, 2, ds)
	if err != nil {
		return nil, err
	}
	x, dy := s[0], s[1]
	if len(x) != 2 || x[0] != op.m.NIn {
		return nil, shapeErr(name, "x", x, fmt.Sprintf("[%d, Ci] ([m.NIn, Ci])", op.m.NIn))
	}
	if len(dy) != 2 || dy[0] != op.m.NOut {
		return nil, shapeErr(name, "dy", dy, fmt.Sprintf("[%d, Co] ([m.NOut, Co])", op.m.NOut))
	}
	k := op.m.Conv.Kernel
	return tensor.Shape{dy[1], k[0], k[1], k[2], x[1]}, nil
}

func (op convWeightGradOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := opkit.CheckArity("grad.ConvWeightGrad", 2, len(vs)); err != nil {
		return nil, err
	}
	dw, err := op.convWeightGrad(vs[0], vs[1])
	if err != nil {
		return nil, err
	}
	return op.weightDense(dw)
}

func (op convWeightGradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op convWeightGradOp) Hashcode() uint32      { return opkit.Hash(op) }
func (op convWeightGradOp) String() string        { return "ConvWeightGrad{" + op.sig() + "}" }

// SymDiff: dw = W(x, dy) is bilinear; its pullback of g [Co, K…, Ci] is
// d(x) = ConvInputGrad(dy, g) and d(dy) = Conv(x, g).
func (op convWeightGradOp) SymDiff(in gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	dX, err := gorgonia.ApplyOp(convInputGradOp(op), in[1], g)
	if err != nil {
		return nil, err
	}
	dDy, err := gorgonia.ApplyOp(convForwardOp(op), in[0], g)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{dX, dDy}, nil
}

func (op convWeightGradOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, out *gorgonia.Node) error {
	gv, err := out.Grad()
	if err != nil {
		return err
	}
	dX, err := op.convInputGrad(in[1].Value(), gv)
	if err != nil {
		return err
	}
	if err := opkit.AccumulateGrad(in[0], "x", dX); err != nil {
		return err
	}
	dDy, err := op.convForward(in[0].Value(), gv)
	if err != nil {
		return err
	}
	return opkit.AccumulateGrad(in[1], "dy", dDy)
}

// convForwardOp is a bias-free sparse convolution x [NIn, Ci], w [Co, K…,
// Ci] → [NOut, Co]. It appears only in second-order gradient graphs; users
// build convolutions with package ops.
type convForwardOp struct{ convBase }

func (op convForwardOp) Arity() int { return 2 }

func (op convForwardOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 5, Of: a}, gorgonia.TensorType{Dims: 2, Of: a})
}

func (op convForwardOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	const name = "Conv"
	s, err := opkit.Shapes("grad."+name, 2, ds)
	if err != nil {
		return nil, err
	}
	x, w := s[0], s[1]
	if err := opkit.CheckWeight("grad."+name, op.m, w); err != nil {
		return nil, err
	}
	if len(x) != 2 || x[0] != op.m.NIn || x[1] != w[4] {
		return nil, shapeErr(name, "x", x, fmt.Sprintf("[%d, %d] ([m.NIn, Ci])", op.m.NIn, w[4]))
	}
	return tensor.Shape{op.m.NOut, w[0]}, nil
}

func (op convForwardOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := opkit.CheckArity("grad.Conv", 2, len(vs)); err != nil {
		return nil, err
	}
	y, err := op.convForward(vs[0], vs[1])
	if err != nil {
		return nil, err
	}
	return opkit.NewDense(y, y.Rows, y.Cols)
}

func (op convForwardOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op convForwardOp) Hashcode() uint32      { return opkit.Hash(op) }
func (op convForwardOp) String() string        { return "GradConv{" + op.sig() + "}" }

func (op convForwardOp) SymDiff(in gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	dX, err := gorgonia.ApplyOp(convInputGradOp(op), g, in[1])
	if err != nil {
		return nil, err
	}
	dW, err := gorgonia.ApplyOp(convWeightGradOp(op), in[0], g)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{dX, dW}, nil
}

func (op convForwardOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, out *gorgonia.Node) error {
	gv, err := out.Grad()
	if err != nil {
		return err
	}
	dX, err := op.convInputGrad(gv, in[1].Value())
	if err != nil {
		return err
	}
	if err := opkit.AccumulateGrad(in[0], "x", dX); err != nil {
		return err
	}
	dW, err := op.convWeightGrad(in[0].Value(), gv)
	if err != nil {
		return err
	}
	return opkit.AccumulateGrad(in[1], "weight", dW)
}

// biasGradOp computes db [Co] = column sums of dy [N, Co].
type biasGradOp struct {
	dt tensor.Dtype
}

func (op biasGradOp) Arity() int { return 1 }

func (op biasGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(gorgonia.TensorType{Dims: 2, Of: a}, gorgonia.TensorType{Dims: 1, Of: a})
}

func (op biasGradOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := opkit.Shapes("grad.BiasGrad", 1, ds)
	if err != nil {
		return nil, err
	}
	if len(s[0]) != 2 {
		return nil, shapeErr("BiasGrad", "dy", s[0], "[N, Co]")
	}
	return tensor.Shape{s[0][1]}, nil
}

func (op biasGradOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := opkit.CheckArity("grad.BiasGrad", 1, len(vs)); err != nil {
		return nil, err
	}
	s := vs[0].Shape()
	if len(s) != 2 {
		return nil, shapeErr("BiasGrad", "dy", s, "[N, Co]")
	}
	dy, err := opkit.Matrix(vs[0], "dy", s[0], s[1])
	if err != nil {
		return nil, err
	}
	db, err := sparse.BiasGrad(dy)
	if err == nil {
		db, err = opkit.Master(db) // a parameter gradient: float32
	}
	if err != nil {
		return nil, err
	}
	return opkit.NewDense(db, s[1])
}

func (op biasGradOp) ReturnsPtr() bool      { return false }
func (op biasGradOp) CallsExtern() bool     { return false }
func (op biasGradOp) OverwritesInput() int  { return -1 }
func (op biasGradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op biasGradOp) Hashcode() uint32      { return opkit.Hash(op) }
func (op biasGradOp) String() string        { return fmt.Sprintf("BiasGrad{%v}", op.dt) }
func (op biasGradOp) DiffWRT(n int) []bool  { return opkit.AllTrue(n) }

// SymDiff: the pullback of a column sum broadcasts g [Co] to every row.
func (op biasGradOp) SymDiff(in gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	d, err := gorgonia.ApplyOp(rowBroadcastOp{rows: in[0].Shape()[0], dt: op.dt}, g)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{d}, nil
}

func (op biasGradOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, out *gorgonia.Node) error {
	s := in[0].Shape()
	gv, err := out.Grad()
	if err != nil {
		return err
	}
	d, err := rowBroadcastOp{rows: s[0], dt: op.dt}.broadcast(gv)
	if err != nil {
		return err
	}
	return opkit.AccumulateGrad(in[0], "dy", d)
}

// rowBroadcastOp repeats a vector b [C] as the rows of a [rows, C] matrix;
// it is the pullback of BiasGrad.
type rowBroadcastOp struct {
	rows int
	dt   tensor.Dtype
}

func (op rowBroadcastOp) Arity() int { return 1 }

func (op rowBroadcastOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(gorgonia.TensorType{Dims: 1, Of: a}, gorgonia.TensorType{Dims: 2, Of: a})
}

func (op rowBroadcastOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := opkit.Shapes("grad.RowBroadcast", 1, ds)
	if err != nil {
		return nil, err
	}
	if len(s[0]) != 1 {
		return nil, shapeErr("RowBroadcast", "b", s[0], "[C]")
	}
	return tensor.Shape{op.rows, s[0][0]}, nil
}

func (op rowBroadcastOp) broadcast(v gorgonia.Value) (sparse.Matrix, error) {
	s := v.Shape()
	if len(s) != 1 {
		return sparse.Matrix{}, shapeErr("RowBroadcast", "b", s, "[C]")
	}
	b, err := opkit.Matrix(v, "b", 1, s[0])
	if err != nil {
		return sparse.Matrix{}, err
	}
	switch d := b.Data.(type) {
	case sparse.Storage:
		return sparse.Matrix{}, fmt.Errorf("%w: grad.RowBroadcast (second-order bias gradients) on a device tensor", device.ErrUnsupported)
	case []float32:
		return sparse.Matrix{Rows: op.rows, Cols: s[0], Data: repeatRows(d, op.rows)}, nil
	default:
		return sparse.Matrix{Rows: op.rows, Cols: s[0], Data: repeatRows(d.([]float64), op.rows)}, nil
	}
}

func repeatRows[T float32 | float64](row []T, n int) []T {
	out := make([]T, 0, n*len(row))
	for range n {
		out = append(out, row...)
	}
	return out
}

func (op rowBroadcastOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := opkit.CheckArity("grad.RowBroadcast", 1, len(vs)); err != nil {
		return nil, err
	}
	m, err := op.broadcast(vs[0])
	if err != nil {
		return nil, err
	}
	return opkit.NewDense(m, m.Rows, m.Cols)
}

func (op rowBroadcastOp) ReturnsPtr() bool      { return false }
func (op rowBroadcastOp) CallsExtern() bool     { return false }
func (op rowBroadcastOp) OverwritesInput() int  { return -1 }
func (op rowBroadcastOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op rowBroadcastOp) Hashcode() uint32      { return opkit.Hash(op) }

// String implements fmt.Stringer for rowBroadcastOp.
func (op rowBroadcastOp) String() string {
	return fmt.Sprintf("RowBroadcast{rows=%d %v}", op.rows, op.dt)
}
func (op rowBroadcastOp) DiffWRT(n int) []bool { return opkit.AllTrue(n) }

func (op rowBroadcastOp) SymDiff(_ gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	d, err := gorgonia.ApplyOp(biasGradOp{dt: op.dt}, g)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{d}, nil
}

func (op rowBroadcastOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, out *gorgonia.Node) error {
	gv, err := out.Grad()
	if err != nil {
		return err
	}
	s := gv.Shape()
	if len(s) != 2 {
		return shapeErr("RowBroadcast", "output gradient", s, "[rows, C]")
	}
	g, err := opkit.Matrix(gv, "output gradient", s[0], s[1])
	if err != nil {
		return err
	}
	db, err := sparse.BiasGrad(g)
	if err != nil {
		return err
	}
	return opkit.AccumulateGrad(in[0], "b", db)
}

func shapeErr(op, arg string, got tensor.Shape, want string) error {
	return opkit.ShapeErr("grad."+op, arg, got, want)
}

func checkNodes(op string, names []string, nodes ...*gorgonia.Node) error {
	return opkit.CheckNodes("grad."+op, names, nodes...)
}

func checkFloatNodes(op string, names []string, nodes ...*gorgonia.Node) (tensor.Dtype, error) {
	return opkit.CheckFloatNodes("grad."+op, names, nodes...)
}
