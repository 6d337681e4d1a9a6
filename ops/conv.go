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
	_ gorgonia.Op   = convOp{}
	_ gorgonia.SDOp = convOp{}
	_ gorgonia.ADOp = convOp{}
)

// ConvOption configures a convolution node.
type ConvOption func(*convConfig)

type convConfig struct {
	bias    *gorgonia.Node
	opt     sparse.ConvOptions
	noInput bool
}

// WithBias adds a bias b [Co] to every output row.
func WithBias(b *gorgonia.Node) ConvOption {
	return func(c *convConfig) { c.bias = b }
}

// WithAlgorithm selects the GEMM formulation of this convolution node (and
// of its gradient nodes): sparse.Explicit, Implicit, ImplicitSplitK,
// MaskedImplicit, MaskedImplicitSplitK or Auto (the default).
func WithAlgorithm(a sparse.Algorithm) ConvOption {
	return func(c *convConfig) { c.opt.Algorithm = a }
}

// WithSplitK sets the number of reduction chunks of the split-K
// algorithms; 0 (the default) lets the engine choose.
func WithSplitK(n int) ConvOption {
	return func(c *convConfig) { c.opt.SplitK = n }
}

// WithTileRows sets the number of output rows per tile of the implicit
// and masked algorithms; 0 (the default) lets the engine choose.
func WithTileRows(n int) ConvOption {
	return func(c *convConfig) { c.opt.TileRows = n }
}

// WithoutInputGrad treats x as a constant: no gradient flows to it, which
// saves a full input-gradient pass for a first layer over raw input
// features. Do not use it on a layer whose input depends on learnables
// (gorgonia.Grad then reports them as not differentiable).
func WithoutInputGrad() ConvOption {
	return func(c *convConfig) { c.noInput = true }
}

// Conv3d applies the sparse convolution described by the kernel map m to
// the features x:
//
//	y[o, :] = b + Σ_v w[:, v, :] · x[m.Nbr[o, v], :]
//
// for a map of any kind (submanifold, strided, inverse, transposed).
// Shapes: x [m.NIn, Ci]; w [Co, Kx, Ky, Kz, Ci] with (Kx, Ky, Kz) =
// m.Conv.Kernel; the optional bias [Co]; result [m.NOut, Co]. x, w and the
// bias must all be float32 or all float64.
//
// The node is differentiable with respect to x, w and the bias, both
// symbolically (gorgonia.Grad, TapeMachine) and in a LispMachine. Wrong
// dtypes, ranks or shapes are reported here, when the graph is built, as
// errors wrapping sparse.ErrDType or sparse.ErrShape.
func Conv3d(x, w *gorgonia.Node, m *kmap.Map, opts ...ConvOption) (*gorgonia.Node, error) {
	return conv3d("Conv3d", -1, x, w, m, opts)
}

// SubMConv3d is Conv3d for a submanifold map (kmap.NewSubmanifold): the
// output rows are the input rows.
func SubMConv3d(x, w *gorgonia.Node, m *kmap.Map, opts ...ConvOption) (*gorgonia.Node, error) {
	return conv3d("SubMConv3d", kmap.Submanifold, x, w, m, opts)
}

// SparseConv3d is Conv3d for a strided map (kmap.NewStrided), the sparse
// counterpart of torch.nn.Conv3d.
func SparseConv3d(x, w *gorgonia.Node, m *kmap.Map, opts ...ConvOption) (*gorgonia.Node, error) {
	return conv3d("SparseConv3d", kmap.Strided, x, w, m, opts)
}

// InverseConv3d is Conv3d for an inverse map (kmap.NewInverse): it goes
// back from a strided convolution's output to exactly its input rows.
func InverseConv3d(x, w *gorgonia.Node, m *kmap.Map, opts ...ConvOption) (*gorgonia.Node, error) {
	return conv3d("InverseConv3d", kmap.Inverse, x, w, m, opts)
}

// TransposedConv3d is Conv3d for a transposed map (kmap.NewTransposed),
// the sparse counterpart of torch.nn.ConvTranspose3d.
func TransposedConv3d(x, w *gorgonia.Node, m *kmap.Map, opts ...ConvOption) (*gorgonia.Node, error) {
	return conv3d("TransposedConv3d", kmap.Transposed, x, w, m, opts)
}

func conv3d(name string, kind kmap.Kind, x, w *gorgonia.Node, m *kmap.Map, opts []ConvOption) (*gorgonia.Node, error) {
	var cfg convConfig
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if m == nil {
		return nil, fmt.Errorf("%w: ops.%s: nil kernel map", ErrNilInput, name)
	}
	if kind >= 0 && m.Kind != kind {
		return nil, fmt.Errorf("%w: ops.%s needs a %v map, got a %v map", ErrMapKind, name, kind, m.Kind)
	}
	names := []string{"x", "weight"}
	nodes := []*gorgonia.Node{x, w}
	if cfg.bias != nil {
		names = append(names, "bias")
		nodes = append(nodes, cfg.bias)
	}
	if err := checkNodes(name, names, nodes...); err != nil {
		return nil, err
	}
	dt, err := checkFloatNodes(name, names, nodes...)
	if err != nil {
		return nil, err
	}
	if err := opkit.CheckConvOptions("ops."+name, cfg.opt); err != nil {
		return nil, err
	}
	op := convOp{m: m, opt: cfg.opt, bias: cfg.bias != nil, noInput: cfg.noInput, dt: dt}
	shapes := make([]gorgonia.DimSizer, len(nodes))
	for i, n := range nodes {
		shapes[i] = n.Shape()
	}
	if _, err := op.inferShape(name, shapes); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, nodes...)
}

// convOp is the forward sparse convolution over one kernel map. Its
// inputs are x [NIn, Ci], w [Co, Kx, Ky, Kz, Ci] and, when bias is set,
// b [Co].
type convOp struct {
	m       *kmap.Map
	opt     sparse.ConvOptions
	bias    bool
	noInput bool // WithoutInputGrad
	dt      tensor.Dtype
}

func (op convOp) Arity() int {
	if op.bias {
		return 3
	}
	return 2
}

// Type returns a fresh function type on every call (Gorgonia recycles it).
func (op convOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	x := gorgonia.TensorType{Dims: 2, Of: a}
	w := gorgonia.TensorType{Dims: 5, Of: a}
	if op.bias {
		return hm.NewFnType(x, w, gorgonia.TensorType{Dims: 1, Of: a}, x)
	}
	return hm.NewFnType(x, w, x)
}

func (op convOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	return op.inferShape("Conv3d", ds)
}

func (op convOp) inferShape(name string, ds []gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops."+name, op.Arity(), ds)
	if err != nil {
		return nil, err
	}
	x, w := s[0], s[1]
	if len(x) != 2 || x[0] != op.m.NIn {
		return nil, shapeErr(name, "x", x, fmt.Sprintf("[%d, Ci] ([m.NIn, Ci])", op.m.NIn))
	}
	if err := opkit.CheckWeight("ops."+name, op.m, w); err != nil {
		return nil, err
	}
	if w[4] != x[1] {
		return nil, shapeErr(name, "weight", w, fmt.Sprintf("[Co, Kx, Ky, Kz, %d] (Ci of x %v)", x[1], x))
	}
	if op.bias {
		if b := s[2]; len(b) != 1 || b[0] != w[0] {
			return nil, shapeErr(name, "bias", b, fmt.Sprintf("[%d] ([Co])", w[0]))
		}
	}
	return tensor.Shape{op.m.NOut, w[0]}, nil
}

// dims returns (Ci, Co) from the weight value's shape.
func (op convOp) dims(w gorgonia.Value) (ci, co int, err error) {
	s := w.Shape()
	if len(s) != 5 {
		return 0, 0, shapeErr("Conv3d", "weight", s, "[Co, Kx, Ky, Kz, Ci]")
	}
	return s[4], s[0], nil
}

// operands views the values of x, w and the bias as matrices.
func (op convOp) operands(x, w, b gorgonia.Value) (mx, mw, mb sparse.Matrix, err error) {
	ci, co, err := op.dims(w)
	if err != nil {
		return
	}
	if mx, err = valueMatrix(x, "x", op.m.NIn, ci); err != nil {
		return
	}
	if mw, err = valueMatrix(w, "weight", co, op.m.V()*ci); err != nil {
		return
	}
	if op.bias {
		mb, err = valueMatrix(b, "bias", 1, co)
	}
	return
}

func (op convOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity(op.String(), op.Arity(), len(vs)); err != nil {
		return nil, err
	}
	var b gorgonia.Value
	if op.bias {
		b = vs[2]
	}
	x, w, bias, err := op.operands(vs[0], vs[1], b)
	if err != nil {
		return nil, err
	}
	release, err := opkit.Harmonize(x, &w, &bias)
	if err != nil {
		return nil, err
	}
	y, err := sparse.Conv(op.m, x, w, bias, op.opt)
	release()
	if err != nil {
		return nil, err
	}
	return matrixDense(y, op.m.NOut, w.Rows)
}

func (op convOp) ReturnsPtr() bool     { return false }
func (op convOp) CallsExtern() bool    { return false }
func (op convOp) OverwritesInput() int { return -1 }

// WriteHash writes every parameter: map identity, kind and geometry,
// algorithm, split-K, tile size, bias presence, input-gradient flag and
// dtype.
func (op convOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op convOp) Hashcode() uint32      { return hashOp(op) }

// String implements fmt.Stringer for convOp.
func (op convOp) String() string {
	return fmt.Sprintf("SparseConv3d{%s bias=%t dx=%t %v}", opkit.ConvSignature(op.m, op.opt), op.bias, !op.noInput, op.dt)
}

// DiffWRT: the convolution is differentiable in every input (but x with
// WithoutInputGrad).
func (op convOp) DiffWRT(n int) []bool {
	d := allTrue(n)
	if op.noInput && n > 0 {
		d[0] = false
	}
	return d
}

// SymDiff returns the gradient nodes dx, dw (and db) built from the
// backward ops of package grad.
func (op convOp) SymDiff(inputs gorgonia.Nodes, output, dy *gorgonia.Node) (gorgonia.Nodes, error) {
	if err := checkArity(op.String(), op.Arity(), len(inputs)); err != nil {
		return nil, err
	}
	var dx *gorgonia.Node
	if !op.noInput {
		var err error
		if dx, err = grad.ConvInputGrad(dy, inputs[1], op.m, op.opt); err != nil {
			return nil, err
		}
	}
	dw, err := grad.ConvWeightGrad(inputs[0], dy, op.m, op.opt)
	if err != nil {
		return nil, err
	}
	out := gorgonia.Nodes{dx, dw}
	if op.bias {
		db, err := grad.BiasGrad(dy)
		if err != nil {
			return nil, err
		}
		out = append(out, db)
	}
	return out, nil
}

// DoDiff accumulates the gradients of x, w (and the bias) in place, for
// the LispMachine.
func (op convOp) DoDiff(ctx gorgonia.ExecutionContext, inputs gorgonia.Nodes, output *gorgonia.Node) error {
	if err := checkArity(op.String(), op.Arity(), len(inputs)); err != nil {
		return err
	}
	var bv gorgonia.Value
	if op.bias {
		bv = inputs[2].Value()
	}
	x, w, _, err := op.operands(inputs[0].Value(), inputs[1].Value(), bv)
	if err != nil {
		return err
	}
	dy, err := outputGradMatrix(output, op.m.NOut, w.Rows)
	if err != nil {
		return err
	}
	if !op.noInput {
		release, err := opkit.Harmonize(dy, &w)
		if err != nil {
			return err
		}
		dx, err := sparse.ConvInputGrad(op.m, dy, w, op.opt)
		release()
		if err != nil {
			return err
		}
		if err := accumulateGrad(inputs[0], "x", dx); err != nil {
			return err
		}
	}
	// The weight gradient multiplies dy in x's dtype (a cast copy, released
	// after); the bias gradient sums dy as it is. Where no cast is needed,
	// both come from one call (sparse.ConvParamGrads: the CUDA engine sums
	// the bias in the weight gradient's kernel).
	dyW := dy
	release, err := opkit.Harmonize(x, &dyW)
	if err != nil {
		return err
	}
	var dw, db sparse.Matrix
	if op.bias && !castFrom(dyW, dy) {
		dw, db, err = sparse.ConvParamGrads(op.m, x, dyW, op.opt)
	} else {
		dw, err = sparse.ConvWeightGrad(op.m, x, dyW, op.opt)
		if err == nil && op.bias {
			db, err = sparse.BiasGrad(dy)
		}
	}
	release()
	if err == nil {
		dw, err = opkit.Master(dw)
	}
	if err == nil && op.bias {
		db, err = opkit.Master(db)
	}
	if err != nil {
		return err
	}
	if err := accumulateGrad(inputs[1], "weight", dw); err != nil {
		return err
	}
	if op.bias {
		if err := accumulateGrad(inputs[2], "bias", db); err != nil {
			return err
		}
	}
	return nil
}

// castFrom reports whether c is a cast copy of m that Harmonize made: both
// device storage of different dtypes.
func castFrom(c, m sparse.Matrix) bool {
	cs, ok1 := c.Data.(sparse.Storage)
	ms, ok2 := m.Data.(sparse.Storage)
	return ok1 && ok2 && cs.DType() != ms.DType()
}
