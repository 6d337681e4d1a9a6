package ops

import (
	"encoding/binary"
	"fmt"
	"hash"
	"hash/fnv"
	"math"

	"github.com/chewxy/hm"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/flexgemm-go/flexgemm/sparse"
)

// IgnoreLabel is the label of a row that SoftmaxCrossEntropy leaves out of
// the loss (and whose logits get a zero gradient).
const IgnoreLabel int32 = -1

// LossOption configures SoftmaxCrossEntropy.
type LossOption func(*lossConfig) error

type lossConfig struct {
	weights []float64
	scale   float64 // gradient scale (loss scaling); 0 means 1
}

// WithClassWeights weighs the loss of a row by weights[label]; the result is
// the weighted mean Σ_i w[y_i]·ℓ_i / Σ_i w[y_i] (as in PyTorch's
// cross_entropy with weight=). There must be one finite, non-negative
// weight per class.
func WithClassWeights(weights ...float64) LossOption {
	return func(c *lossConfig) error {
		for k, w := range weights {
			if !(w >= 0) || math.IsInf(w, 0) {
				return fmt.Errorf("%w: ops.SoftmaxCrossEntropy: class weight %d is %v, want finite and ≥ 0", ErrOption, k, w)
			}
		}
		c.weights = append([]float64(nil), weights...)
		return nil
	}
}

// SoftmaxCrossEntropy returns the mean cross-entropy of the row-wise
// softmax of logits against labels, a scalar node:
//
//	ℓ_i  = log Σ_k exp(logits[i, k]) − logits[i, labels[i]]
//	loss = Σ_i w[labels[i]]·ℓ_i / Σ_i w[labels[i]]
//
// over the rows whose label is not IgnoreLabel; w is 1 unless
// WithClassWeights is given. The log-sum-exp subtracts the row maximum, so
// large logits neither overflow nor lose precision. Shapes: logits [N, K]
// (float32 or float64), labels [N] with values in [0, K) or IgnoreLabel.
// When no row counts (N = 0, every row ignored, or all weights zero) the
// loss is 0 and so is its gradient. The gradient with respect to logits is
// (softmax − onehot)·w[labels[i]] / Σw per row, symbolically
// (gorgonia.Grad) and in a LispMachine.
func SoftmaxCrossEntropy(logits *gorgonia.Node, labels []int32, opts ...LossOption) (*gorgonia.Node, error) {
	names := []string{"logits"}
	if err := checkNodes("SoftmaxCrossEntropy", names, logits); err != nil {
		return nil, err
	}
	if _, err := checkFloatNodes("SoftmaxCrossEntropy", names, logits); err != nil {
		return nil, err
	}
	s := logits.Shape()
	if s.Dims() != 2 {
		return nil, &sparse.ShapeError{Op: "SoftmaxCrossEntropy", Arg: "logits", Want: "[N, K]", Got: fmt.Sprint(s)}
	}
	var cfg lossConfig
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	op, err := newXentOp(s[0], s[1], labels, cfg.weights)
	if err != nil {
		return nil, err
	}
	op.scale = cfg.scale
	op.dev = &xentDeviceCache{}
	return gorgonia.ApplyOp(op, logits)
}

// xentOp holds the labels and weights of one loss; both are copied, so the
// caller may reuse its slices.
type xentOp struct {
	labels  []int32
	weights []float64 // nil = all ones
	k       int
	hash    uint64           // FNV-64a of labels and weights, so that gorgonia never merges two losses with different labels
	scale   float64          // gradient scale (WithLossScale); 0 means 1
	dev     *xentDeviceCache // labels uploaded to a device, shared by the loss and its gradient op
}

func newXentOp(n, k int, labels []int32, weights []float64) (xentOp, error) {
	if len(labels) != n {
		return xentOp{}, &sparse.ShapeError{Op: "SoftmaxCrossEntropy", Arg: "labels", Want: fmt.Sprintf("[%d]", n), Got: fmt.Sprintf("[%d]", len(labels))}
	}
	if weights != nil && len(weights) != k {
		return xentOp{}, &sparse.ShapeError{Op: "SoftmaxCrossEntropy", Arg: "class weights", Want: fmt.Sprintf("[%d]", k), Got: fmt.Sprintf("[%d]", len(weights))}
	}
	for i, l := range labels {
		if l != IgnoreLabel && (l < 0 || int(l) >= k) {
			return xentOp{}, fmt.Errorf("%w: SoftmaxCrossEntropy: label %d of row %d is outside [0, %d) and not IgnoreLabel", sparse.ErrOutOfRange, l, i, k)
		}
	}
	op := xentOp{labels: append([]int32(nil), labels...), k: k}
	if weights != nil {
		op.weights = append([]float64(nil), weights...)
	}
	h := fnv.New64a()
	var b [8]byte
	for _, l := range op.labels {
		binary.LittleEndian.PutUint32(b[:4], uint32(l))
		h.Write(b[:4])
	}
	for _, w := range op.weights {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(w))
		h.Write(b[:])
	}
	op.hash = h.Sum64()
	return op, nil
}

var (
	_ gorgonia.Op   = xentOp{}
	_ gorgonia.SDOp = xentOp{}
	_ gorgonia.ADOp = xentOp{}
)

func (xentOp) Arity() int { return 1 }

func (xentOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	return hm.NewFnType(gorgonia.TensorType{Dims: 2, Of: a}, a)
}

func (op xentOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops.SoftmaxCrossEntropy", 1, in)
	if err != nil {
		return nil, err
	}
	if err := op.checkShape(s[0]); err != nil {
		return nil, err
	}
	return tensor.ScalarShape(), nil
}

func (op xentOp) checkShape(s tensor.Shape) error {
	if s.Dims() != 2 || s[0] != len(op.labels) || s[1] != op.k {
		return &sparse.ShapeError{Op: "SoftmaxCrossEntropy", Arg: "logits", Want: fmt.Sprintf("[%d, %d]", len(op.labels), op.k), Got: fmt.Sprint(s)}
	}
	return nil
}

func (op xentOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops.SoftmaxCrossEntropy", 1, len(in)); err != nil {
		return nil, err
	}
	if err := op.checkShape(in[0].Shape()); err != nil {
		return nil, err
	}
	if onDevice(in[0]) {
		return op.forwardDevice(in[0])
	}
	var loss float64
	if in[0].Shape().TotalSize() > 0 {
		switch z := in[0].Data().(type) {
		case []float64:
			loss = xentForward(z, op.labels, op.weights, op.k)
		case []float32:
			loss = xentForward(z, op.labels, op.weights, op.k)
		default:
			return nil, fmt.Errorf("%w: SoftmaxCrossEntropy: logits hold %T", sparse.ErrDType, in[0].Data())
		}
	}
	if in[0].Dtype() == tensor.Float32 {
		return gorgonia.NewF32(float32(loss)), nil
	}
	return gorgonia.NewF64(loss), nil
}

func (xentOp) ReturnsPtr() bool     { return false }
func (xentOp) CallsExtern() bool    { return false }
func (xentOp) OverwritesInput() int { return -1 }
func (op xentOp) WriteHash(h hash.Hash) {
	fmt.Fprint(h, op.String())
}
func (op xentOp) Hashcode() uint32 { return hashOp(op) }

// String implements fmt.Stringer for xentOp.
func (op xentOp) String() string {
	return fmt.Sprintf("SoftmaxCrossEntropy{n=%d, k=%d, weighted=%t, labels=%016x, gradscale=%g}", len(op.labels), op.k, op.weights != nil, op.hash, op.gradScale())
}

func (xentOp) DiffWRT(n int) []bool { return allTrue(n) }

// SymDiff returns the gradient of the logits, xentGradOp(logits, grad).
func (op xentOp) SymDiff(in gorgonia.Nodes, _, grad *gorgonia.Node) (gorgonia.Nodes, error) {
	if err := checkArity("ops.SoftmaxCrossEntropy", 1, len(in)); err != nil {
		return nil, err
	}
	d, err := gorgonia.ApplyOp(xentGradOp{op}, in[0], grad)
	if err != nil {
		return nil, err
	}
	return gorgonia.Nodes{d}, nil
}

// DoDiff adds the gradient of the logits to their dual value (LispMachine).
func (op xentOp) DoDiff(_ gorgonia.ExecutionContext, in gorgonia.Nodes, output *gorgonia.Node) error {
	if err := checkArity("ops.SoftmaxCrossEntropy", 1, len(in)); err != nil {
		return err
	}
	g, err := output.Grad()
	if err != nil {
		return err
	}
	d, err := xentGradOp{op}.Do(in[0].Value(), g)
	if err != nil {
		return err
	}
	return normAddGrad(in[0], d)
}

// xentGradOp maps (logits [N, K], upstream scalar g) to the gradient of
// g·loss with respect to the logits.
type xentGradOp struct{ xentOp }

var _ gorgonia.Op = xentGradOp{}

func (xentGradOp) Arity() int { return 2 }

func (xentGradOp) Type() hm.Type {
	a := hm.TypeVariable('a')
	m := gorgonia.TensorType{Dims: 2, Of: a}
	return hm.NewFnType(m, a, m)
}

func (op xentGradOp) InferShape(in ...gorgonia.DimSizer) (tensor.Shape, error) {
	s, err := inputShapes("ops.SoftmaxCrossEntropyGrad", 2, in)
	if err != nil {
		return nil, err
	}
	if err := op.checkShape(s[0]); err != nil {
		return nil, err
	}
	return s[0].Clone(), nil
}

func (op xentGradOp) Do(in ...gorgonia.Value) (gorgonia.Value, error) {
	if err := checkArity("ops.SoftmaxCrossEntropyGrad", 2, len(in)); err != nil {
		return nil, err
	}
	s := in[0].Shape()
	if err := op.checkShape(s); err != nil {
		return nil, err
	}
	g, err := scalarOf(in[1])
	if err != nil {
		return nil, err
	}
	g *= op.gradScale()
	if onDevice(in[0]) {
		return op.backwardDevice(in[0], g)
	}
	if s.TotalSize() == 0 {
		return tensor.New(tensor.Of(in[0].Dtype()), tensor.WithShape(s.Clone()...)), nil
	}
	switch z := in[0].Data().(type) {
	case []float64:
		d := make([]float64, len(z))
		xentBackward(z, d, op.labels, op.weights, op.k, g)
		return tensor.New(tensor.WithShape(s.Clone()...), tensor.WithBacking(d)), nil
	case []float32:
		d := make([]float32, len(z))
		xentBackward(z, d, op.labels, op.weights, op.k, g)
		return tensor.New(tensor.WithShape(s.Clone()...), tensor.WithBacking(d)), nil
	}
	return nil, fmt.Errorf("%w: SoftmaxCrossEntropy gradient: logits hold %T", sparse.ErrDType, in[0].Data())
}

func (op xentGradOp) WriteHash(h hash.Hash) { fmt.Fprint(h, op.String()) }
func (op xentGradOp) Hashcode() uint32      { return hashOp(op) }
func (op xentGradOp) String() string        { return "Grad" + op.xentOp.String() }

// scalarOf reads a scalar value (gorgonia scalar or one-element tensor).
func scalarOf(v gorgonia.Value) (float64, error) {
	if v.Shape().TotalSize() == 1 {
		switch d := v.Data().(type) {
		case float64:
			return d, nil
		case float32:
			return float64(d), nil
		case []float64:
			return d[0], nil
		case []float32:
			return float64(d[0]), nil
		}
	}
	return 0, fmt.Errorf("%w: expected a float scalar, got %v of shape %v", sparse.ErrShape, v.Dtype(), v.Shape())
}

// xentRow returns the row maximum and log Σ exp(z − max) of one row.
func xentRow[T float32 | float64](z []T) (m, lse float64) {
	m = math.Inf(-1)
	for _, v := range z {
		m = max(m, float64(v))
	}
	s := 0.0
	for _, v := range z {
		s += math.Exp(float64(v) - m)
	}
	return m, math.Log(s)
}

func xentWeight(weights []float64, l int32) float64 {
	if l == IgnoreLabel {
		return 0
	}
	if weights == nil {
		return 1
	}
	return weights[l]
}

func xentTotalWeight(labels []int32, weights []float64) float64 {
	t := 0.0
	for _, l := range labels {
		t += xentWeight(weights, l)
	}
	return t
}

func xentForward[T float32 | float64](z []T, labels []int32, weights []float64, k int) float64 {
	tw := xentTotalWeight(labels, weights)
	if tw == 0 {
		return 0
	}
	sum := 0.0
	for i, l := range labels {
		w := xentWeight(weights, l)
		if w == 0 {
			continue
		}
		row := z[i*k : i*k+k]
		m, lse := xentRow(row)
		sum += w * (m + lse - float64(row[l]))
	}
	return sum / tw
}

func xentBackward[T float32 | float64](z, d []T, labels []int32, weights []float64, k int, g float64) {
	tw := xentTotalWeight(labels, weights)
	if tw == 0 {
		return
	}
	for i, l := range labels {
		w := xentWeight(weights, l)
		if w == 0 {
			continue
		}
		row, out := z[i*k:i*k+k], d[i*k:i*k+k]
		m, lse := xentRow(row)
		s := g * w / tw
		for j, v := range row {
			p := math.Exp(float64(v) - m - lse)
			if j == int(l) {
				p--
			}
			out[j] = T(s * p)
		}
	}
}

// ArgmaxRows returns, for each row of the [N, K] float32 or float64 value v
// (for example a node's Value() after a run), the column of its largest
// entry; ties go to the lowest column. K must be positive unless N = 0.
func ArgmaxRows(v gorgonia.Value) ([]int32, error) {
	if v == nil {
		return nil, fmt.Errorf("%w: ArgmaxRows: nil value", sparse.ErrShape)
	}
	s := v.Shape()
	if s.Dims() != 2 {
		return nil, &sparse.ShapeError{Op: "ArgmaxRows", Arg: "v", Want: "[N, K]", Got: fmt.Sprint(s)}
	}
	n, k := s[0], s[1]
	if n == 0 {
		return []int32{}, nil
	}
	if k == 0 {
		return nil, &sparse.ShapeError{Op: "ArgmaxRows", Arg: "v", Want: fmt.Sprintf("[%d, K>0]", n), Got: fmt.Sprint(s)}
	}
	if onDevice(v) {
		return argmaxRowsDevice(v, n, k)
	}
	switch z := v.Data().(type) {
	case []float64:
		return argmaxRows(z, n, k), nil
	case []float32:
		return argmaxRows(z, n, k), nil
	}
	return nil, fmt.Errorf("%w: ArgmaxRows: %v", sparse.ErrDType, v.Dtype())
}

func argmaxRows[T float32 | float64](z []T, n, k int) []int32 {
	out := make([]int32, n)
	for i := range n {
		row := z[i*k : i*k+k]
		best := 0
		for j := 1; j < k; j++ {
			if row[j] > row[best] {
				best = j
			}
		}
		out[i] = int32(best)
	}
	return out
}
