package ops

// Shared unexported helpers for every op of this package (convolution,
// pooling, grid sampling, serialisation, and the normalisation/loss ops).
// Use these instead of defining new generic helpers in other files.

import (
	"errors"
	"hash"

	"github.com/flexgemm-go/flexgemm/internal/opkit"
	"github.com/flexgemm-go/flexgemm/sparse"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Sentinel errors of this package. Shape and dtype problems are reported
// with the sparse package's ErrShape and ErrDType, wrapped with a message
// naming the op, the argument and the offending value.
var (
	// ErrMapKind reports a kernel map of the wrong kind for an op, such as
	// a strided map given to SubMConv3d.
	ErrMapKind = errors.New("ops: wrong kernel-map kind")
	// ErrOption reports an invalid op option, such as a negative split-K
	// (the same value as grad.ErrOption; such errors also wrap
	// sparse.ErrOptions).
	ErrOption = opkit.ErrOption
	// ErrNilInput reports a nil node, kernel map or other required argument
	// (the same value as grad.ErrNilInput).
	ErrNilInput = opkit.ErrNilInput
)

// hashOp is the Hashcode of an op: FNV-32a of its WriteHash text.
func hashOp(op interface{ WriteHash(hash.Hash) }) uint32 { return opkit.Hash(op) }

// checkArity reports whether an op named name received n values.
func checkArity(name string, want, got int) error { return opkit.CheckArity(name, want, got) }

// inputShapes converts the DimSizers of InferShape into n shapes.
func inputShapes(name string, n int, ds []gorgonia.DimSizer) ([]tensor.Shape, error) {
	return opkit.Shapes(name, n, ds)
}

// valueMatrix views a Do argument as a [rows, cols] sparse.Matrix without
// copying.
func valueMatrix(v gorgonia.Value, arg string, rows, cols int) (sparse.Matrix, error) {
	return opkit.Matrix(v, arg, rows, cols)
}

// valueData returns the contiguous backing slice of a dense Do argument
// ([]float32, []float64, []int32 or []int64; empty tensors work) and its
// shape.
func valueData(v gorgonia.Value, arg string) (any, tensor.Shape, error) {
	d, err := opkit.Dense(v, arg)
	if err != nil {
		return nil, nil, err
	}
	data, err := opkit.Data(d, arg)
	if err != nil {
		return nil, nil, err
	}
	return data, d.Shape(), nil
}

// matrixDense wraps a result matrix as a dense tensor of the given shape
// without copying.
func matrixDense(m sparse.Matrix, shape ...int) (*tensor.Dense, error) {
	return opkit.NewDense(m, shape...)
}

// sliceDense wraps a host slice as a dense tensor of the given shape
// without copying.
func sliceDense(data any, shape ...int) (*tensor.Dense, error) {
	return opkit.FromSlice(data, shape...)
}

// accumulateGrad adds src into the LispMachine gradient of node n in place
// (for ADOp.DoDiff).
func accumulateGrad(n *gorgonia.Node, arg string, src sparse.Matrix) error {
	return opkit.AccumulateGrad(n, arg, src)
}

// nodeValueMatrix views the value of node n as a [rows, cols] matrix.
func nodeValueMatrix(n *gorgonia.Node, arg string, rows, cols int) (sparse.Matrix, error) {
	return opkit.NodeMatrix(n, arg, rows, cols)
}

// outputGradMatrix views the LispMachine gradient of an op's output node
// as a [rows, cols] matrix.
func outputGradMatrix(out *gorgonia.Node, rows, cols int) (sparse.Matrix, error) {
	return opkit.OutputGrad(out, rows, cols)
}

// allTrue returns a DiffWRT slice of n trues.
func allTrue(n int) []bool { return opkit.AllTrue(n) }

// checkNodes reports a nil node among nodes (named by names) or nodes from
// different graphs.
func checkNodes(op string, names []string, nodes ...*gorgonia.Node) error {
	return opkit.CheckNodes("ops."+op, names, nodes...)
}

// checkFloatNodes reports nodes that are not float32/float64 or whose dtype
// differs from the first node's, and returns the common dtype.
func checkFloatNodes(op string, names []string, nodes ...*gorgonia.Node) (tensor.Dtype, error) {
	return opkit.CheckFloatNodes("ops."+op, names, nodes...)
}

// shapeErr formats a shape mismatch of argument arg of op.
func shapeErr(op, arg string, got tensor.Shape, want string) error {
	return opkit.ShapeErr("ops."+op, arg, got, want)
}
