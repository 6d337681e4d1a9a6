package ops

import (
	"fmt"
	"math"
	"sync"

	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"gorgonia.org/gorgonia"
)

// WithLossScale multiplies the gradient that SoftmaxCrossEntropy sends
// back by s (the loss value itself is not scaled). It is the loss scaling
// of float16 mixed-precision training: small gradients stay representable
// in float16, and the optimiser divides the parameter gradients by s again
// (see device.LossScaler). s must be positive and finite.
func WithLossScale(s float64) LossOption {
	return func(c *lossConfig) error {
		if !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("%w: ops.SoftmaxCrossEntropy: loss scale %v, want positive and finite", ErrOption, s)
		}
		c.scale = s
		return nil
	}
}

// gradScale returns the loss scale (1 unless WithLossScale was given).
func (op xentOp) gradScale() float64 {
	if op.scale == 0 {
		return 1
	}
	return op.scale
}

// xentDeviceCache holds the labels (and class weights) of one loss on the
// device, uploaded once per step and shared by the loss op and its
// gradient op.
type xentDeviceCache struct {
	mu      sync.Mutex
	d       *device.Device
	step    uint64
	labels  sparse.Matrix
	weights sparse.Matrix
}

// deviceLabels returns the labels [N, 1] Int32 and the class weights
// [1, K] Float32 (or the zero Matrix) on d. Inside a step they are cached
// for the step (release is a no-op); outside one, release frees them.
func (op xentOp) deviceLabels(d *device.Device) (labels, weights sparse.Matrix, release func(), err error) {
	c := op.dev
	if c == nil {
		c = &xentDeviceCache{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	step := d.StepID()
	if step != 0 && c.d == d && c.step == step {
		return c.labels, c.weights, func() {}, nil
	}
	hl := sparse.Matrix{Rows: len(op.labels), Cols: 1, Data: op.labels}
	if labels, err = d.Upload(hl, sparse.Int32, device.Inputs); err != nil {
		return
	}
	if op.weights != nil {
		hw := sparse.Matrix{Rows: 1, Cols: op.k, Data: op.weights}
		if weights, err = d.Upload(hw, sparse.Float32, device.Inputs); err != nil {
			d.Release(labels)
			return
		}
	}
	if step == 0 {
		return labels, weights, func() { d.Release(labels, weights) }, nil
	}
	c.d, c.step, c.labels, c.weights = d, step, labels, weights
	return labels, weights, func() {}, nil
}

// forwardDevice computes the loss of device logits: a Float32 scalar
// computed on the device, of which only the 4 bytes of the value are
// copied back (counted as device.Scalars).
func (op xentOp) forwardDevice(zv gorgonia.Value) (gorgonia.Value, error) {
	d, err := deviceOf("SoftmaxCrossEntropy", zv)
	if err != nil {
		return nil, err
	}
	z, err := devMatrix("SoftmaxCrossEntropy", "logits", zv, len(op.labels), op.k)
	if err != nil {
		return nil, err
	}
	labels, weights, release, err := op.deviceLabels(d)
	if err != nil {
		return nil, err
	}
	defer release()
	scale := 0.0
	if tw := xentTotalWeight(op.labels, op.weights); tw > 0 {
		scale = 1 / tw
	}
	loss, err := d.Alloc(sparse.Float32, 1, 1)
	if err != nil {
		return nil, err
	}
	defer d.Release(loss)
	if err := d.Run("loss", func(nn device.NN) error {
		return nn.XentForward(loss, z, labels, weights, float32(scale))
	}); err != nil {
		return nil, err
	}
	h, err := d.Download(loss, device.Scalars)
	if err != nil {
		return nil, err
	}
	return gorgonia.NewF32(h.F32()[0]), nil
}

// backwardDevice computes g·(softmax − onehot)·w/Σw on the device, in the
// logits' storage dtype (g already includes the loss scale).
func (op xentOp) backwardDevice(zv gorgonia.Value, g float64) (gorgonia.Value, error) {
	d, err := deviceOf("SoftmaxCrossEntropyGrad", zv)
	if err != nil {
		return nil, err
	}
	n := len(op.labels)
	z, err := devMatrix("SoftmaxCrossEntropyGrad", "logits", zv, n, op.k)
	if err != nil {
		return nil, err
	}
	labels, weights, release, err := op.deviceLabels(d)
	if err != nil {
		return nil, err
	}
	defer release()
	scale := 0.0
	if tw := xentTotalWeight(op.labels, op.weights); tw > 0 {
		scale = g / tw
	}
	out, dz, err := devEmpty(d, storageDType(zv), n, op.k, zv.Shape())
	if err != nil {
		return nil, err
	}
	if err := d.Run("loss", func(nn device.NN) error {
		return nn.XentBackward(dz, z, labels, weights, float32(scale))
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// argmaxRowsDevice computes the row maxima on the device and copies the
// [N] indices back (counted as device.Metrics).
func argmaxRowsDevice(v gorgonia.Value, n, k int) ([]int32, error) {
	d, err := deviceOf("ArgmaxRows", v)
	if err != nil {
		return nil, err
	}
	x, err := devMatrix("ArgmaxRows", "v", v, n, k)
	if err != nil {
		return nil, err
	}
	idx, err := d.Alloc(sparse.Int32, n, 1)
	if err != nil {
		return nil, err
	}
	defer d.Release(idx)
	if err := d.Run("metrics", func(nn device.NN) error { return nn.ArgmaxRows(idx, x) }); err != nil {
		return nil, err
	}
	h, err := d.Download(idx, device.Metrics)
	if err != nil {
		return nil, err
	}
	return h.I32(), nil
}
