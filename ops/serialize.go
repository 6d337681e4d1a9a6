package ops

import (
	"fmt"
	"hash"
	"math"

	"github.com/chewxy/hm"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/serialize"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

var (
	_ gorgonia.Op   = serializeOp{}
	_ gorgonia.SDOp = serializeOp{}
	_ gorgonia.ADOp = serializeOp{}
)

// Serialize returns the space-filling-curve codes of coordinates:
// coords [N, 4] Int32 rows of (batch, x, y, z) inside ext become [N] Int64
// codes in the given mode (serialize.ZOrder or serialize.Hilbert), as
// serialize.Encode computes them. A code of 2^63 or more, possible only
// for extents whose codes need all 64 bits, cannot be stored as an int64
// and makes the run fail with an error wrapping serialize.ErrTooLarge.
//
// The node is not differentiable (integer output) but does not stop
// gorgonia.Grad from differentiating the rest of the graph.
func Serialize(coords *gorgonia.Node, ext grid.Extent, mode serialize.Mode) (*gorgonia.Node, error) {
	op := serializeOp{ext: ext, mode: mode}
	if err := op.check(coords, tensor.Int32, "coords"); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, coords)
}

// Deserialize is the inverse of Serialize: codes [N] Int64 become
// coordinates [N, 4] Int32. A negative code or one that is not the code of
// a site of ext makes the run fail with an error wrapping
// serialize.ErrOutOfRange. The node is not differentiable.
func Deserialize(codes *gorgonia.Node, ext grid.Extent, mode serialize.Mode) (*gorgonia.Node, error) {
	op := serializeOp{ext: ext, mode: mode, decode: true}
	if err := op.check(codes, tensor.Int64, "codes"); err != nil {
		return nil, err
	}
	return gorgonia.ApplyOp(op, codes)
}

// serializeOp encodes [N, 4] Int32 coordinates into [N] Int64 codes, or
// decodes them back when decode is set.
type serializeOp struct {
	ext    grid.Extent
	mode   serialize.Mode
	decode bool
}

func (op serializeOp) name() string {
	if op.decode {
		return "Deserialize"
	}
	return "Serialize"
}

func (op serializeOp) check(n *gorgonia.Node, dt tensor.Dtype, arg string) error {
	name := op.name()
	if err := checkNodes(name, []string{arg}, n); err != nil {
		return err
	}
	if err := op.mode.Valid(); err != nil {
		return fmt.Errorf("ops.%s: %w", name, err)
	}
	if _, _, err := serialize.Bits(op.ext); err != nil {
		return fmt.Errorf("ops.%s: %w", name, err)
	}
	if n.Dtype() != dt {
		return fmt.Errorf("%w: ops.%s: %s has dtype %v, want %v", sparse.ErrDType, name, arg, n.Dtype(), dt)
	}
	_, err := op.InferShape(n.Shape())
	return err
}

func (op serializeOp) Arity() int { return 1 }

// Type is concrete: Int32 matrix → Int64 vector (or back).
func (op serializeOp) Type() hm.Type {
	coords := gorgonia.TensorType{Dims: 2, Of: tensor.Int32}
	codes := gorgonia.TensorType{Dims: 1, Of: tensor.Int64}
	if op.decode {
		return hm.NewFnType(codes, coords)
	}
	return hm.NewFnType(coords, codes)
}

func (op serializeOp) InferShape(ds ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops."+op.name(), 1, ds)
	if err != nil {
		return nil, err
	}
	in := s[0]
	if op.decode {
		if len(in) != 1 {
			return nil, shapeErr(op.name(), "codes", in, "[N]")
		}
		return tensor.Shape{in[0], 4}, nil
	}
	if len(in) != 2 || in[1] != 4 {
		return nil, shapeErr(op.name(), "coords", in, "[N, 4]")
	}
	return tensor.Shape{in[0]}, nil
}

func (op serializeOp) Do(vs ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops."+op.name(), 1, len(vs)); err != nil {
		return nil, err
	}
	if op.decode {
		return op.doDecode(vs[0])
	}
	return op.doEncode(vs[0])
}

func (op serializeOp) doEncode(v gorgonia.Value) (gorgonia.Value, error) {
	data, shape, err := valueData(v, "coords")
	if err != nil {
		return nil, err
	}
	coords, ok := data.([]int32)
	if !ok || len(shape) != 2 || shape[1] != 4 {
		return nil, fmt.Errorf("%w: ops.Serialize: coords is %v %T, want [N, 4] int32", sparse.ErrShape, shape, data)
	}
	n := shape[0]
	codes := make([]uint64, n)
	if err := serialize.Encode(op.mode, coords, op.ext, codes); err != nil {
		return nil, fmt.Errorf("ops.Serialize: %w", err)
	}
	out := make([]int64, n)
	for i, c := range codes {
		if c > math.MaxInt64 {
			return nil, fmt.Errorf("%w: ops.Serialize: code %#x of row %d is 2^63 or more and does not fit in an int64 (extent %v)", serialize.ErrTooLarge, c, i, op.ext)
		}
		out[i] = int64(c)
	}
	return sliceDense(out, n)
}

func (op serializeOp) doDecode(v gorgonia.Value) (gorgonia.Value, error) {
	data, shape, err := valueData(v, "codes")
	if err != nil {
		return nil, err
	}
	codes, ok := data.([]int64)
	if !ok || len(shape) != 1 {
		return nil, fmt.Errorf("%w: ops.Deserialize: codes is %v %T, want [N] int64", sparse.ErrShape, shape, data)
	}
	u := make([]uint64, len(codes))
	for i, c := range codes {
		if c < 0 {
			return nil, fmt.Errorf("%w: ops.Deserialize: code %d at index %d is negative", serialize.ErrOutOfRange, c, i)
		}
		u[i] = uint64(c)
	}
	out := make([]int32, 4*len(codes))
	if err := serialize.Decode(op.mode, u, op.ext, out); err != nil {
		return nil, fmt.Errorf("ops.Deserialize: %w", err)
	}
	return sliceDense(out, len(codes), 4)
}

func (op serializeOp) ReturnsPtr() bool      { return false }
func (op serializeOp) CallsExtern() bool     { return false }
func (op serializeOp) OverwritesInput() int  { return -1 }
func (op serializeOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op serializeOp) Hashcode() uint32      { return hashOp(op) }

// String implements fmt.Stringer for serializeOp.
func (op serializeOp) String() string {
	return fmt.Sprintf("%s{%v %v}", op.name(), op.mode, op.ext)
}

// DiffWRT is all false: the op is an SDOp only so that gorgonia.Grad
// accepts graphs that contain it.
func (op serializeOp) DiffWRT(n int) []bool { return make([]bool, n) }

// SymDiff is never called for an op that is not differentiable in any
// input; it returns one nil gradient per input.
func (op serializeOp) SymDiff(inputs gorgonia.Nodes, _, _ *gorgonia.Node) (gorgonia.Nodes, error) {
	return make(gorgonia.Nodes, len(inputs)), nil
}

// DoDiff does nothing: integer codes and coordinates have no gradient.
func (op serializeOp) DoDiff(gorgonia.ExecutionContext, gorgonia.Nodes, *gorgonia.Node) error {
	return nil
}
