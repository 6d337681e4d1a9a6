package ops

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ReLU returns max(x, 0) element-wise, for a float32 or float64 tensor of
// any shape. It is differentiable (the gradient passes where x > 0) and,
// unlike gorgonia.Rectify (a comparison and a product of built-in ops),
// runs on device tensors as one kernel forward and one backward.
func ReLU(x *gorgonia.Node) (*gorgonia.Node, error) {
	if err := checkNodes("ReLU", []string{"x"}, x); err != nil {
		return nil, err
	}
	dt, err := checkFloatNodes("ReLU", []string{"x"}, x)
	if err != nil {
		return nil, err
	}
	if x.Shape().IsScalar() {
		return nil, shapeErr("ReLU", "x", x.Shape(), "a tensor")
	}
	return gorgonia.ApplyOp(reluOp{dims: x.Dims(), dt: dt}, x)
}

var (
	_ gorgonia.Op   = reluOp{}
	_ gorgonia.SDOp = reluOp{}
	_ gorgonia.ADOp = reluOp{}
	_ gorgonia.Op   = reluGradOp{}
	_ gorgonia.SDOp = reluGradOp{}
)

// reluOp is max(x, 0).
type reluOp struct {
	dims int
	dt   tensor.Dtype
}

func (op reluOp) Arity() int { return 1 }

func (op reluOp) Type() hm.Type {
	t := gorgonia.TensorType{Dims: op.dims, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t, t)
}

func (op reluOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops.ReLU", 1, ds)
	if err != nil {
		return nil, err
	}
	return s[0].Clone(), nil
}

func (op reluOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops.ReLU", 1, len(vs)); err != nil {
		return nil, err
	}
	return reluApply("ReLU", vs[0], nil)
}

// reluApply computes max(x, 0) (dy == nil) or the gradient x > 0 ? dy : 0.
func reluApply(op string, x, dy gorgonia.Value) (gorgonia.Value, error) {
	d, err := deviceOf(op, x, dy)
	if err != nil {
		return nil, err
	}
	shape := x.Shape()
	if dy != nil && !dy.Shape().Eq(shape) {
		return nil, shapeErr(op, "dy", dy.Shape(), fmt.Sprint(shape))
	}
	n := shape.TotalSize()
	if d != nil {
		xm, err := devMatrix(op, "x", x, n, 1)
		if err != nil {
			return nil, err
		}
		src := x
		var dm sparse.Matrix
		if dy != nil {
			if dm, err = devMatrix(op, "dy", dy, n, 1); err != nil {
				return nil, err
			}
			src = dy
		}
		out, om, err := devEmpty(d, storageDType(src), n, 1, shape)
		if err != nil {
			return nil, err
		}
		err = d.Run("relu", func(nn device.NN) error {
			if dy == nil {
				return nn.ReLU(om, xm)
			}
			return nn.ReLUGrad(om, xm, dm)
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	xd, _, err := valueData(x, "x")
	if err != nil {
		return nil, err
	}
	var dd any
	if dy != nil {
		if dd, _, err = valueData(dy, "dy"); err != nil {
			return nil, err
		}
	}
	switch xs := xd.(type) {
	case []float32:
		g, _ := dd.([]float32)
		return sliceDense(reluHost(xs, g, dy != nil), shape.Clone()...)
	case []float64:
		g, _ := dd.([]float64)
		return sliceDense(reluHost(xs, g, dy != nil), shape.Clone()...)
	}
	return nil, fmt.Errorf("%w: ops.%s: x holds %T", sparse.ErrDType, op, xd)
}

func reluHost[T float32 | float64](x, dy []T, grad bool) []T {
	out := make([]T, len(x))
	for i, v := range x {
		switch {
		case !(v > 0):
		case grad:
			out[i] = dy[i]
		default:
			out[i] = v
		}
	}
	return out
}

func (op reluOp) ReturnsPtr() bool      { return false }
func (op reluOp) CallsExtern() bool     { return false }
func (op reluOp) OverwritesInput() int  { return -1 }
func (op reluOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op reluOp) Hashcode() uint32      { return hashOp(op) }
func (op reluOp) String() string        { return fmt.Sprintf("ReLU{dims=%d %v}", op.dims, op.dt) }
func (op reluOp) DiffWRT(n int) []bool  { return allTrue(n) }

func (op reluOp) SymDiff(in gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	if err := checkArity("ops.ReLU", 1, len(in)); err != nil {
		return nil, err
	}
	dx, err := gorgonia.ApplyOp(reluGradOp(op), in[0], g)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{dx}, nil
}

func (op reluOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, out *gorgonia.Node) error {
	if err := checkArity("ops.ReLU", 1, len(in)); err != nil {
		return err
	}
	g, err := out.Grad()
	if err != nil {
		return err
	}
	dx, err := reluApply("ReLU", in[0].Value(), g)
	if err != nil {
		return err
	}
	return normAddGrad(in[0], dx)
}

// reluGradOp maps (x, dy) to x > 0 ? dy : 0. It is linear in dy, so its
// own gradient is itself (and zero in x).
type reluGradOp reluOp

func (op reluGradOp) Arity() int { return 2 }

func (op reluGradOp) Type() hm.Type {
	t := gorgonia.TensorType{Dims: op.dims, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t, t, t)
}

func (op reluGradOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops.ReLUGrad", 2, ds)
	if err != nil {
		return nil, err
	}
	if !s[0].Eq(s[1]) {
		return nil, shapeErr("ReLUGrad", "dy", s[1], fmt.Sprint(s[0]))
	}
	return s[0].Clone(), nil
}

func (op reluGradOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops.ReLUGrad", 2, len(vs)); err != nil {
		return nil, err
	}
	return reluApply("ReLUGrad", vs[0], vs[1])
}

func (op reluGradOp) ReturnsPtr() bool      { return false }
func (op reluGradOp) CallsExtern() bool     { return false }
func (op reluGradOp) OverwritesInput() int  { return -1 }
func (op reluGradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op reluGradOp) Hashcode() uint32      { return hashOp(op) }
func (op reluGradOp) String() string        { return fmt.Sprintf("ReLUGrad{dims=%d %v}", op.dims, op.dt) }
func (op reluGradOp) DiffWRT(int) []bool    { return []bool{false, true} }

func (op reluGradOp) SymDiff(in gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	if err := checkArity("ops.ReLUGrad", 2, len(in)); err != nil {
		return nil, err
	}
	d, err := gorgonia.ApplyOp(op, in[0], g)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{nil, d}, nil
}

// ConcatChannels concatenates [N, Ci] feature matrices along the channels
// (columns) into [N, ΣCi]: the skip connection of a UNet. All inputs must
// have the same number of rows and dtype. The gradient of each input is
// its block of columns of the output gradient. On device tensors both
// directions are column copies on the device, where gorgonia.Concat's
// gradient (a slice of a tensor view) would need host access.
func ConcatChannels(xs ...*gorgonia.Node) (*gorgonia.Node, error) {
	if len(xs) == 0 {
		return nil, fmt.Errorf("%w: ops.ConcatChannels needs at least one input", ErrNilInput)
	}
	names := make([]string, len(xs))
	for i := range xs {
		names[i] = fmt.Sprintf("x%d", i)
	}
	if err := checkNodes("ConcatChannels", names, xs...); err != nil {
		return nil, err
	}
	dt, err := checkFloatNodes("ConcatChannels", names, xs...)
	if err != nil {
		return nil, err
	}
	op := concatOp{cols: make([]int, len(xs)), dt: dt}
	for i, x := range xs {
		s := x.Shape()
		if s.Dims() != 2 || s[0] != xs[0].Shape()[0] {
			return nil, shapeErr("ConcatChannels", names[i], s, fmt.Sprintf("[%d, C]", xs[0].Shape()[0]))
		}
		op.cols[i] = s[1]
	}
	return gorgonia.ApplyOp(op, xs...)
}

var (
	_ gorgonia.Op   = concatOp{}
	_ gorgonia.SDOp = concatOp{}
	_ gorgonia.ADOp = concatOp{}
	_ gorgonia.Op   = colsOp{}
	_ gorgonia.SDOp = colsOp{}
)

// concatOp concatenates matrices with cols[i] columns each.
type concatOp struct {
	cols []int
	dt   tensor.Dtype
}

func (op concatOp) Arity() int { return len(op.cols) }

func (op concatOp) Type() hm.Type {
	t := gorgonia.TensorType{Dims: 2, Of: hm.TypeVariable('a')}
	ts := make([]hm.Type, len(op.cols)+1)
	for i := range ts {
		ts[i] = t
	}
	return hm.NewFnType(ts...)
}

func (op concatOp) total() int {
	t := 0
	for _, c := range op.cols {
		t += c
	}
	return t
}

func (op concatOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops.ConcatChannels", len(op.cols), ds)
	if err != nil {
		return nil, err
	}
	for i, x := range s {
		if x.Dims() != 2 || x[0] != s[0][0] || x[1] != op.cols[i] {
			return nil, shapeErr("ConcatChannels", fmt.Sprintf("x%d", i), x, fmt.Sprintf("[%d, %d]", s[0][0], op.cols[i]))
		}
	}
	return tensor.Shape{s[0][0], op.total()}, nil
}

func (op concatOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops.ConcatChannels", len(op.cols), len(vs)); err != nil {
		return nil, err
	}
	shapes := make([]gorgonia.DimSizer, len(vs))
	for i, v := range vs {
		shapes[i] = v.Shape()
	}
	s, err := op.InferShape(shapes...)
	if err != nil {
		return nil, err
	}
	n, total := s[0], s[1]
	d, err := deviceOf("ConcatChannels", vs...)
	if err != nil {
		return nil, err
	}
	if d != nil {
		ms := make([]sparse.Matrix, len(vs))
		dt := sparse.DType(-1)
		for i, v := range vs {
			if ms[i], err = devMatrix("ConcatChannels", fmt.Sprintf("x%d", i), v, n, op.cols[i]); err != nil {
				return nil, err
			}
			if vd := storageDType(v); dt < 0 || vd == sparse.Float32 {
				dt = vd
			} else if vd != dt {
				dt = sparse.Float32
			}
		}
		out, om, err := devEmpty(d, dt, n, total, s)
		if err != nil {
			return nil, err
		}
		err = d.Run("concat", func(nn device.NN) error {
			col := 0
			for i, m := range ms {
				if err := nn.CopyCols(om, col, m, 0, op.cols[i]); err != nil {
					return err
				}
				col += op.cols[i]
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	datas := make([]any, len(vs))
	for i, v := range vs {
		if datas[i], _, err = valueData(v, fmt.Sprintf("x%d", i)); err != nil {
			return nil, err
		}
	}
	switch datas[0].(type) {
	case []float32:
		return sliceDense(concatHost[float32](datas, op.cols, n, total), n, total)
	case []float64:
		return sliceDense(concatHost[float64](datas, op.cols, n, total), n, total)
	}
	return nil, fmt.Errorf("%w: ops.ConcatChannels: x0 holds %T", sparse.ErrDType, datas[0])
}

func concatHost[T float32 | float64](datas []any, cols []int, n, total int) []T {
	out := make([]T, n*total)
	col := 0
	for k, d := range datas {
		x, c := d.([]T), cols[k]
		for r := range n {
			copy(out[r*total+col:r*total+col+c], x[r*c:r*c+c])
		}
		col += c
	}
	return out
}

func (op concatOp) ReturnsPtr() bool      { return false }
func (op concatOp) CallsExtern() bool     { return false }
func (op concatOp) OverwritesInput() int  { return -1 }
func (op concatOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op concatOp) Hashcode() uint32      { return hashOp(op) }
func (op concatOp) String() string        { return fmt.Sprintf("ConcatChannels{cols=%v %v}", op.cols, op.dt) }
func (op concatOp) DiffWRT(n int) []bool  { return allTrue(n) }

func (op concatOp) SymDiff(in gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	if err := checkArity("ops.ConcatChannels", len(op.cols), len(in)); err != nil {
		return nil, err
	}
	out := make(gorgonia.Nodes, len(in))
	start := 0
	for i, c := range op.cols {
		var err error
		if out[i], err = gorgonia.ApplyOp(colsOp{start: start, cols: c, total: op.total(), dt: op.dt}, g); err != nil {
			return nil, err
		}
		start += c
	}
	return out, nil
}

func (op concatOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, out *gorgonia.Node) error {
	if err := checkArity("ops.ConcatChannels", len(op.cols), len(in)); err != nil {
		return err
	}
	g, err := out.Grad()
	if err != nil {
		return err
	}
	start := 0
	for i, c := range op.cols {
		d, err := colsOp{start: start, cols: c, total: op.total(), dt: op.dt}.Do(g)
		if err != nil {
			return err
		}
		if err := normAddGrad(in[i], d); err != nil {
			return err
		}
		start += c
	}
	return nil
}

// colsOp extracts the columns [start, start+cols) of an [N, total] matrix
// (pad = false), or places an [N, cols] matrix at those columns of an
// [N, total] matrix of zeros (pad = true). The two are each other's
// adjoints, so the pair is closed under differentiation.
type colsOp struct {
	start, cols, total int
	pad                bool
	dt                 tensor.Dtype
}

func (op colsOp) Arity() int { return 1 }

func (op colsOp) Type() hm.Type {
	t := gorgonia.TensorType{Dims: 2, Of: hm.TypeVariable('a')}
	return hm.NewFnType(t, t)
}

func (op colsOp) in() int {
	if op.pad {
		return op.cols
	}
	return op.total
}

func (op colsOp) out() int {
	if op.pad {
		return op.total
	}
	return op.cols
}

func (op colsOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops.Columns", 1, ds)
	if err != nil {
		return nil, err
	}
	if s[0].Dims() != 2 || s[0][1] != op.in() {
		return nil, shapeErr("Columns", "x", s[0], fmt.Sprintf("[N, %d]", op.in()))
	}
	return tensor.Shape{s[0][0], op.out()}, nil
}

func (op colsOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops.Columns", 1, len(vs)); err != nil {
		return nil, err
	}
	s, err := op.InferShape(vs[0].Shape())
	if err != nil {
		return nil, err
	}
	n := s[0]
	d, err := deviceOf("Columns", vs[0])
	if err != nil {
		return nil, err
	}
	if d != nil {
		xm, err := devMatrix("Columns", "x", vs[0], n, op.in())
		if err != nil {
			return nil, err
		}
		out, om, err := devEmpty(d, storageDType(vs[0]), n, op.out(), s)
		if err != nil {
			return nil, err
		}
		err = d.Run("concat", func(nn device.NN) error {
			if !op.pad {
				return nn.CopyCols(om, 0, xm, op.start, op.cols)
			}
			if err := d.Memory().Fill(om, 0); err != nil {
				return err
			}
			return nn.CopyCols(om, op.start, xm, 0, op.cols)
		})
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	x, _, err := valueData(vs[0], "x")
	if err != nil {
		return nil, err
	}
	switch xs := x.(type) {
	case []float32:
		return sliceDense(colsHost(xs, n, op), n, op.out())
	case []float64:
		return sliceDense(colsHost(xs, n, op), n, op.out())
	}
	return nil, fmt.Errorf("%w: ops.Columns: x holds %T", sparse.ErrDType, x)
}

func colsHost[T float32 | float64](x []T, n int, op colsOp) []T {
	in, out := op.in(), op.out()
	y := make([]T, n*out)
	for r := range n {
		if op.pad {
			copy(y[r*out+op.start:r*out+op.start+op.cols], x[r*in:r*in+in])
		} else {
			copy(y[r*out:r*out+out], x[r*in+op.start:r*in+op.start+op.cols])
		}
	}
	return y
}

func (op colsOp) ReturnsPtr() bool      { return false }
func (op colsOp) CallsExtern() bool     { return false }
func (op colsOp) OverwritesInput() int  { return -1 }
func (op colsOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op colsOp) Hashcode() uint32      { return hashOp(op) }

// String implements fmt.Stringer for colsOp.
func (op colsOp) String() string {
	return fmt.Sprintf("Columns{start=%d cols=%d total=%d pad=%t %v}", op.start, op.cols, op.total, op.pad, op.dt)
}
func (op colsOp) DiffWRT(n int) []bool { return allTrue(n) }

func (op colsOp) SymDiff(in gorgonia.Nodes, _, g *gorgonia.Node) (gorgonia.Nodes, error) {
	adj := op
	adj.pad = !op.pad
	d, err := gorgonia.ApplyOp(adj, g)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{d}, nil
}
