// Package opkit holds the plumbing shared by the Gorgonia op packages ops
// and grad: zero-copy conversion between Gorgonia values and sparse.Matrix,
// process-unique kernel-map identifiers for op hashes, in-place gradient
// accumulation, and the hash and signature helpers every op uses.
//
// Device tensors (package ops/device) pass through the same functions:
// Matrix views one as a device sparse.Matrix, NewDense wraps a device
// result as a device tensor of the result's device, and Harmonize and
// Master apply the mixed-precision rules of the convolution ops.
//
// It is internal because its functions assume the checks done by the op
// constructors; users build graphs through packages ops and grad.
package opkit

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ErrValue reports a value handed to an op's Do that is not a dense tensor
// of the expected dtype and shape. Graph construction checks make it rare:
// it means a value was bound with the wrong shape or type.
var ErrValue = errors.New("opkit: bad value")

// mapIDs maps weak pointers to kernel maps to their identifiers. An entry
// is removed when its map is garbage collected, so building a graph per
// batch does not leak maps; identifiers are never reused.
var (
	mapIDs    sync.Map // weak.Pointer[kmap.Map] → uint64
	nextMapID atomic.Uint64
)

// MapID returns a process-unique, non-zero identifier of the kernel map m
// (0 for nil). The same map always gets the same identifier; two distinct
// maps alive at the same time never share one, and identifiers are not
// reused after a map is collected. Ops put it in their hashes so that
// Gorgonia never merges nodes built on different maps.
func MapID(m *kmap.Map) uint64 {
	if m == nil {
		return 0
	}
	key := weak.Make(m)
	if id, ok := mapIDs.Load(key); ok {
		return id.(uint64)
	}
	id := nextMapID.Add(1)
	if prev, loaded := mapIDs.LoadOrStore(key, id); loaded {
		return prev.(uint64)
	}
	runtime.AddCleanup(m, func(k weak.Pointer[kmap.Map]) { mapIDs.Delete(k) }, key)
	return id
}

// Hash returns the FNV-32a hash of what w writes, the Hashcode convention
// of Gorgonia ops.
func Hash(w interface{ WriteHash(hash.Hash) }) uint32 {
	h := fnv.New32a()
	w.WriteHash(h)
	return h.Sum32()
}

// ConvSignature describes a kernel map and convolution options in the
// text used by op names and hashes: the map identity and kind, its
// geometry and sizes, and every option.
func ConvSignature(m *kmap.Map, opt sparse.ConvOptions) string {
	s := fmt.Sprintf("%s algo=%v splitk=%d tile=%d", MapSignature(m), opt.Algorithm, opt.SplitK, opt.TileRows)
	if opt.NarrowWeightGrad {
		s += " narrow-wgrad"
	}
	return s
}

// MapSignature describes a kernel map: identity, kind, geometry and sizes.
func MapSignature(m *kmap.Map) string {
	if m == nil {
		return "map#0"
	}
	c := m.Conv
	return fmt.Sprintf("map#%d %v K=%v S=%v P=%v D=%v nin=%d nout=%d",
		MapID(m), m.Kind, c.Kernel, c.Stride, c.Padding, c.Dilation, m.NIn, m.NOut)
}

// IsFloat reports whether dt is a floating-point dtype the engines support.
func IsFloat(dt tensor.Dtype) bool { return dt == tensor.Float32 || dt == tensor.Float64 }

// Dense returns v as a *tensor.Dense whose Data() is contiguous and exactly
// as long as its shape says. A view is materialised (copied); anything else
// is returned as is. Device tensors are returned as they are (a view of
// one is an error).
func Dense(v gorgonia.Value, arg string) (*tensor.Dense, error) {
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("%w: %s is %T, want *tensor.Dense", ErrValue, arg, v)
	}
	if device.IsDevice(d) {
		if _, err := device.Of(d); err != nil {
			return nil, fmt.Errorf("%s: %w", arg, err)
		}
		return d, nil
	}
	if d.IsView() || d.RequiresIterator() {
		m, ok := d.Materialize().(*tensor.Dense)
		if !ok {
			return nil, fmt.Errorf("%w: %s: cannot materialise view", ErrValue, arg)
		}
		d = m
	}
	return d, nil
}

// Data returns the contiguous backing slice of d: a []float32, []float64,
// []int32 or []int64 of length d.Shape().TotalSize(). It works for tensors
// with no elements (tensor.Dense.Data panics on those). Device tensors
// have no host data: they give an error wrapping device.ErrUnsupported.
func Data(d *tensor.Dense, arg string) (any, error) {
	if device.IsDevice(d) {
		return nil, fmt.Errorf("%w: %s is a device tensor; this operation needs host data", device.ErrUnsupported, arg)
	}
	n := d.Shape().TotalSize()
	if d.Shape().IsScalar() {
		return nil, fmt.Errorf("%w: %s is a scalar, want a tensor", ErrValue, arg)
	}
	if n == 0 {
		switch d.Dtype() {
		case tensor.Float32:
			return []float32{}, nil
		case tensor.Float64:
			return []float64{}, nil
		case tensor.Int32:
			return []int32{}, nil
		case tensor.Int64:
			return []int64{}, nil
		}
		return nil, fmt.Errorf("%w: %s has dtype %v", ErrValue, arg, d.Dtype())
	}
	var l int
	data := d.Data()
	switch s := data.(type) {
	case []float32:
		l = len(s)
	case []float64:
		l = len(s)
	case []int32:
		l = len(s)
	case []int64:
		l = len(s)
	default:
		return nil, fmt.Errorf("%w: %s has dtype %v", ErrValue, arg, d.Dtype())
	}
	if l < n {
		return nil, fmt.Errorf("%w: %s of shape %v holds %d elements", ErrValue, arg, d.Shape(), l)
	}
	switch s := data.(type) {
	case []float32:
		return s[:n:n], nil
	case []float64:
		return s[:n:n], nil
	case []int32:
		return s[:n:n], nil
	default:
		return data.([]int64)[:n:n], nil
	}
}

// Matrix views v as a [rows, cols] sparse.Matrix without copying (unless v
// is a non-contiguous view). The value must hold exactly rows·cols
// floating-point elements. A device tensor gives a device matrix (its
// storage may be float16 or bfloat16).
func Matrix(v gorgonia.Value, arg string, rows, cols int) (sparse.Matrix, error) {
	if device.IsDevice(v) {
		m, _, err := device.MatrixOf(v, rows, cols)
		if err != nil {
			return sparse.Matrix{}, fmt.Errorf("%w: %s: %w", ErrValue, arg, err)
		}
		return m, nil
	}
	d, err := Dense(v, arg)
	if err != nil {
		return sparse.Matrix{}, err
	}
	if !IsFloat(d.Dtype()) {
		return sparse.Matrix{}, fmt.Errorf("%w: %s has dtype %v, want float32 or float64", ErrValue, arg, d.Dtype())
	}
	if d.Shape().TotalSize() != rows*cols {
		return sparse.Matrix{}, fmt.Errorf("%w: %s has shape %v, want %d elements ([%d, %d])", ErrValue, arg, d.Shape(), rows*cols, rows, cols)
	}
	data, err := Data(d, arg)
	if err != nil {
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: rows, Cols: cols, Data: data}, nil
}

// NewDense wraps the data of m as a *tensor.Dense of the given shape
// without copying: host data as an ordinary tensor, device data as a
// device tensor of the device that owns it. The shape's total size must
// equal m.Rows·m.Cols.
func NewDense(m sparse.Matrix, shape ...int) (*tensor.Dense, error) {
	if tensor.Shape(shape).TotalSize() != m.Rows*m.Cols || len(shape) == 0 {
		return nil, fmt.Errorf("%w: a [%d, %d] result cannot have shape %v", ErrValue, m.Rows, m.Cols, shape)
	}
	if _, ok := m.Data.(sparse.Storage); ok {
		d := device.Owner(m)
		if d == nil {
			return nil, fmt.Errorf("%w: result data %T belongs to no open device", ErrValue, m.Data)
		}
		return d.Wrap(m, shape...)
	}
	return FromSlice(m.Data, shape...)
}

// FromSlice wraps a host slice ([]float32, []float64, []int32, []int64) as
// a *tensor.Dense of the given shape without copying.
func FromSlice(data any, shape ...int) (*tensor.Dense, error) {
	var dt tensor.Dtype
	var n int
	switch s := data.(type) {
	case []float32:
		dt, n = tensor.Float32, len(s)
	case []float64:
		dt, n = tensor.Float64, len(s)
	case []int32:
		dt, n = tensor.Int32, len(s)
	case []int64:
		dt, n = tensor.Int64, len(s)
	default:
		return nil, fmt.Errorf("%w: result data of type %T is not a host slice", ErrValue, data)
	}
	if n != tensor.Shape(shape).TotalSize() {
		return nil, fmt.Errorf("%w: %d elements cannot have shape %v", ErrValue, n, shape)
	}
	if n == 0 {
		return tensor.New(tensor.Of(dt), tensor.WithShape(shape...)), nil
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data)), nil
}

// AddInto adds src element-wise into the gradient value dst in place (the
// LispMachine accumulation convention for ADOp.DoDiff). dst must be a
// contiguous dense tensor with the same dtype and number of elements.
func AddInto(dst gorgonia.Value, arg string, src sparse.Matrix) error {
	d, ok := dst.(*tensor.Dense)
	if !ok {
		return fmt.Errorf("%w: gradient of %s is %T, want *tensor.Dense", ErrValue, arg, dst)
	}
	if device.IsDevice(d) {
		return device.AddInto(d, src)
	}
	if d.IsView() || d.RequiresIterator() {
		return fmt.Errorf("%w: gradient of %s is a non-contiguous view", ErrValue, arg)
	}
	data, err := Data(d, "gradient of "+arg)
	if err != nil {
		return err
	}
	switch s := data.(type) {
	case []float32:
		return addTo(s, src.F32(), arg)
	case []float64:
		return addTo(s, src.F64(), arg)
	}
	return fmt.Errorf("%w: gradient of %s has dtype %v", ErrValue, arg, d.Dtype())
}

func addTo[T float32 | float64](dst, src []T, arg string) error {
	if len(src) != len(dst) {
		return fmt.Errorf("%w: gradient of %s has %d elements, the update %d (or another dtype)", ErrValue, arg, len(dst), len(src))
	}
	for i, v := range src {
		dst[i] += v
	}
	return nil
}

// Shapes converts the DimSizers handed to InferShape into shapes, checking
// that there are exactly n of them.
func Shapes(op string, n int, ds []gorgonia.DimSizer) ([]tensor.Shape, error) {
	if len(ds) != n {
		return nil, fmt.Errorf("%w: %s takes %d inputs, got %d", sparse.ErrShape, op, n, len(ds))
	}
	out := make([]tensor.Shape, n)
	for i, d := range ds {
		s, ok := d.(tensor.Shape)
		if !ok {
			return nil, fmt.Errorf("%w: %s: input %d has shape of type %T", sparse.ErrShape, op, i, d)
		}
		out[i] = s
	}
	return out, nil
}

// CheckArity reports whether op received exactly n values.
func CheckArity(op string, n int, got int) error {
	if got != n {
		return fmt.Errorf("%w: %s takes %d inputs, got %d", sparse.ErrShape, op, n, got)
	}
	return nil
}

// Sentinel errors shared by packages ops and grad (each re-exports them).
var (
	// ErrNilInput reports a nil node, kernel map or other required argument.
	ErrNilInput = errors.New("nil argument")
	// ErrOption reports an invalid op option, such as a negative split-K.
	ErrOption = errors.New("invalid option")
)

// CheckNodes reports a nil node among nodes (named by names) or nodes from
// different graphs. op is the qualified op name used in messages, such as
// "ops.Conv3d".
func CheckNodes(op string, names []string, nodes ...*gorgonia.Node) error {
	var g *gorgonia.ExprGraph
	for i, n := range nodes {
		if n == nil {
			return fmt.Errorf("%w: %s: %s is nil", ErrNilInput, op, names[i])
		}
		if g == nil {
			g = n.Graph()
		} else if n.Graph() != g {
			return fmt.Errorf("%w: %s: %s belongs to another graph than %s", sparse.ErrShape, op, names[i], names[0])
		}
	}
	return nil
}

// CheckFloatNodes reports nodes that are not float32/float64 or whose
// dtype differs from the first node's, and returns the common dtype.
func CheckFloatNodes(op string, names []string, nodes ...*gorgonia.Node) (tensor.Dtype, error) {
	var dt tensor.Dtype
	for i, n := range nodes {
		d := n.Dtype()
		if !IsFloat(d) {
			return dt, fmt.Errorf("%w: %s: %s has dtype %v, want float32 or float64", sparse.ErrDType, op, names[i], d)
		}
		if i == 0 {
			dt = d
		} else if d != dt {
			return dt, fmt.Errorf("%w: %s: %s has dtype %v but %s is %v", sparse.ErrDType, op, names[i], d, names[0], dt)
		}
	}
	return dt, nil
}

// ShapeErr formats a shape mismatch of argument arg of op.
func ShapeErr(op, arg string, got tensor.Shape, want string) error {
	return fmt.Errorf("%w: %s: %s has shape %v, want %s", sparse.ErrShape, op, arg, got, want)
}

// CheckConvOptions reports an unknown algorithm or a negative split-K or
// tile size (errors wrap both ErrOption and sparse.ErrOptions). Engine
// limits such as a largest split-K are checked when the op runs.
func CheckConvOptions(op string, opt sparse.ConvOptions) error {
	if err := opt.Algorithm.Valid(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if opt.SplitK < 0 {
		return fmt.Errorf("%w: %w: %s: split-K %d is negative", ErrOption, sparse.ErrOptions, op, opt.SplitK)
	}
	if opt.TileRows < 0 {
		return fmt.Errorf("%w: %w: %s: tile rows %d is negative", ErrOption, sparse.ErrOptions, op, opt.TileRows)
	}
	return nil
}

// CheckWeight checks a weight shape [Co, Kx, Ky, Kz, Ci] against m's
// kernel size.
func CheckWeight(op string, m *kmap.Map, w tensor.Shape) error {
	k := m.Conv.Kernel
	if len(w) != 5 || w[1] != k[0] || w[2] != k[1] || w[3] != k[2] {
		return ShapeErr(op, "weight", w, fmt.Sprintf("[Co, %d, %d, %d, Ci] (the map's kernel %v)", k[0], k[1], k[2], k))
	}
	return nil
}

// AccumulateGrad adds src into the LispMachine gradient of node n in place
// (the ADOp.DoDiff convention).
func AccumulateGrad(n *gorgonia.Node, arg string, src sparse.Matrix) error {
	g, err := n.Grad()
	if err != nil {
		return fmt.Errorf("%w: gradient of %s: %w", ErrValue, arg, err)
	}
	return AddInto(g, arg, src)
}

// OutputGrad views the LispMachine gradient of an op's output node as a
// [rows, cols] matrix.
func OutputGrad(out *gorgonia.Node, rows, cols int) (sparse.Matrix, error) {
	g, err := out.Grad()
	if err != nil {
		return sparse.Matrix{}, fmt.Errorf("%w: output gradient: %w", ErrValue, err)
	}
	return Matrix(g, "output gradient", rows, cols)
}

// NodeMatrix views the value of node n as a [rows, cols] matrix.
func NodeMatrix(n *gorgonia.Node, arg string, rows, cols int) (sparse.Matrix, error) {
	return Matrix(n.Value(), arg, rows, cols)
}

// AllTrue returns a DiffWRT slice of n trues.
func AllTrue(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

// Harmonize applies the mixed-precision rule of the convolution ops: when
// act is a device matrix, every other device operand whose storage dtype
// differs from act's (a float32 master weight next to float16 or bfloat16
// activations) is replaced by a copy in act's dtype. release frees those
// copies; call it once the operands are no longer needed. Host operands
// are left alone.
func Harmonize(act sparse.Matrix, others ...*sparse.Matrix) (release func(), err error) {
	return device.Harmonize(act, others...)
}

// Master returns a parameter gradient in float32: a device matrix with
// float16 or bfloat16 storage is converted (and the narrow one released);
// anything else is returned as it is. The weight and bias gradients of
// the convolution engines already are float32 for narrow activations
// (straight from their float32 accumulators, see
// sparse.ConvOptions.NarrowWeightGrad), so for them it converts nothing;
// it still converts when a caller asked for narrow weight gradients.
func Master(m sparse.Matrix) (sparse.Matrix, error) { return device.Master(m) }
