package unet

import (
	"fmt"
	"math"
	"strconv"
	"sync/atomic"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/flexgemm-go/flexgemm/examples/unet/internal/scenes"
	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
)

// Sample is a batch ready for the network: its voxels and labels, its
// kernel maps (built once and reused every epoch) and its input features.
type Sample struct {
	Batch *scenes.Batch
	// Maps are the kernel maps; nil for a sample prepared for a device
	// that builds maps, until the step that first uses it builds them
	// there from Levels.
	Maps *Maps
	// Levels are the coordinates of every level (set when Maps are left
	// to the device).
	Levels *Levels
	X      *tensor.Dense
}

// Trainer runs Adam steps on a model, where the model computes (see
// Model.Place). The optimiser keeps its moment estimates per position in
// the model's parameter list, which never changes.
type Trainer struct {
	Model *Model
	// Opt is the optimiser (Gorgonia's Adam update, state on the device).
	Opt *device.Adam
	// Scaler, if set, applies dynamic loss scaling (needed for float16
	// activations): the loss gradient is multiplied by Scaler.Scale and
	// steps whose gradients overflow are skipped.
	Scaler *device.LossScaler
	// LossOptions are passed to ops.SoftmaxCrossEntropy.
	LossOptions []ops.LossOption

	ready    *stepGraph   // the graph StepAhead compiled for its next sample
	compiles atomic.Int64 // graphs compiled (tests)
}

// NewTrainer returns a trainer with an Adam optimiser of learning rate lr.
// For a model placed on a device with float16 activations it adds a loss
// scaler starting at 2^12.
func NewTrainer(m *Model, lr float64) (*Trainer, error) {
	if !(lr > 0) || math.IsInf(lr, 0) {
		return nil, fmt.Errorf("%w: learning rate %v", ErrConfig, lr)
	}
	t := &Trainer{Model: m, Opt: device.NewAdam(lr)}
	if m.Device().Activations() == sparse.Float16 {
		t.Scaler = device.NewLossScaler(1 << 12)
	}
	return t, nil
}

// StepResult reports one training step.
type StepResult struct {
	Loss float64
	// Pred holds the predicted class of every voxel (before the update).
	Pred []int32
	// Skipped reports a step whose update the loss scaler skipped
	// (gradient overflow in float16).
	Skipped bool
	// Transfers are the bytes copied between host and device in the step.
	Transfers device.Transfers
}

// Step runs forward and backward on the sample and updates the
// parameters in place.
func (t *Trainer) Step(s *Sample) (StepResult, error) { return t.StepAhead(s, nil) }

// StepAhead is Step for s that also builds and compiles the graph of the
// next sample on another goroutine while this one runs s: graph
// construction, symbolic differentiation and compilation take milliseconds
// of host time per step, which then overlap the step instead of adding to
// it. The next call with next as its sample uses that graph. next may be
// nil; results are identical to Step's.
func (t *Trainer) StepAhead(s, next *Sample) (res StepResult, err error) {
	d := t.Model.Device()
	st, err := d.BeginStep()
	if err != nil {
		return res, err
	}
	defer func() {
		if e := st.End(); e != nil && err == nil {
			err = e
		}
	}()
	// On a device that builds kernel maps, a sample's maps are built in
	// the first step that needs them: the next sample's here, before its
	// graph is compiled, so only coordinates are uploaded.
	if err := t.Model.deviceMaps(s); err != nil {
		return res, err
	}
	g := t.ready
	t.ready = nil
	if g == nil || g.s != s || g.scale != t.lossScale() {
		if g != nil {
			g.close()
		}
		if g, err = t.compile(s, t.lossScale()); err != nil {
			return res, err
		}
	}
	defer g.close()
	if next != nil {
		if err := t.Model.deviceMaps(next); err != nil {
			return res, err
		}
		type compiled struct {
			g   *stepGraph
			err error
		}
		done := make(chan compiled, 1)
		scale := t.lossScale()
		go func() {
			ng, err := t.compile(next, scale)
			done <- compiled{ng, err}
		}()
		defer func() {
			c := <-done
			switch {
			case c.err != nil && err == nil:
				err = c.err
			case c.err == nil && err == nil:
				t.ready = c.g
			case c.err == nil:
				c.g.close()
			}
		}()
	}
	x, err := d.Input(s.X)
	if err != nil {
		return res, err
	}
	if err := gorgonia.Let(g.net.Input, x); err != nil {
		return res, fmt.Errorf("unet: binding the features: %w", err)
	}
	if err := g.vm.RunAll(); err != nil {
		return res, fmt.Errorf("unet: training step on %s: %w", d.Name(), err)
	}
	lv, err := scalar(g.loss.Value())
	if err != nil {
		return res, err
	}
	if math.IsNaN(lv) || math.IsInf(lv, 0) {
		return res, fmt.Errorf("unet: training diverged (loss %v)", lv)
	}
	gv := make([]gorgonia.Value, len(g.grads))
	for i, n := range g.grads {
		gv[i] = n.Value()
	}
	if t.Scaler == nil {
		if err := t.Opt.Step(g.net.Values, gv, 1); err != nil {
			return res, fmt.Errorf("unet: optimiser: %w", err)
		}
	} else {
		// The scaler reads the overflow flag (it waits for the device);
		// when it changes the scale, the next call rebuilds the graph
		// compiled ahead with the old one.
		applied, err := t.Scaler.Step(d, t.Opt, g.net.Values, gv)
		if err != nil {
			return res, fmt.Errorf("unet: optimiser: %w", err)
		}
		res.Skipped = !applied
	}
	pred, err := ops.ArgmaxRows(*g.logits)
	if err != nil {
		return res, err
	}
	res.Loss, res.Pred, res.Transfers = lv, pred, st.Transfers()
	return res, nil
}

// stepGraph is the compiled training graph of one sample: the network
// with its input node unbound, the loss, the gradients of the parameters
// and the tape machine.
type stepGraph struct {
	s      *Sample
	scale  float64 // the loss scale the graph was built with
	net    *Net
	loss   *gorgonia.Node
	logits *gorgonia.Value
	grads  gorgonia.Nodes
	vm     gorgonia.VM
}

func (g *stepGraph) close() {
	if g.vm != nil {
		g.vm.Close()
		g.vm = nil
	}
}

// lossScale returns the scale the loss gradient is multiplied by.
func (t *Trainer) lossScale() float64 {
	if t.Scaler == nil {
		return 1
	}
	return t.Scaler.Scale
}

// compile builds the training graph of s with loss scale scale (host
// work only: nothing runs on the device; safe to run while another
// goroutine runs a step).
func (t *Trainer) compile(s *Sample, scale float64) (*stepGraph, error) {
	g := &stepGraph{s: s, scale: scale, logits: new(gorgonia.Value)}
	t.compiles.Add(1)
	var err error
	if g.net, err = t.Model.BuildFor(s.X.Shape()[0], s.Maps); err != nil {
		return nil, err
	}
	lossOpts := t.LossOptions
	if t.Scaler != nil {
		lossOpts = append(append([]ops.LossOption(nil), lossOpts...), ops.WithLossScale(scale))
	}
	if g.loss, err = ops.SoftmaxCrossEntropy(g.net.Logits, s.Batch.Labels, lossOpts...); err != nil {
		return nil, err
	}
	gorgonia.Read(g.net.Logits, g.logits)
	if g.grads, err = gorgonia.Grad(g.loss, g.net.Learnables...); err != nil {
		return nil, fmt.Errorf("unet: gradient graph: %w", err)
	}
	g.vm = gorgonia.NewTapeMachine(g.net.Graph, t.Model.Device().VMOpt())
	return g, nil
}

// Predict runs the network forward on the sample and returns the loss and
// the predicted class of every voxel. VoxelNorm uses the statistics of this
// batch (see ops.VoxelNorm).
func (m *Model) Predict(s *Sample) (lv float64, pred []int32, err error) {
	d := m.Device()
	st, err := d.BeginStep()
	if err != nil {
		return 0, nil, err
	}
	defer func() {
		if e := st.End(); e != nil && err == nil {
			err = e
		}
	}()
	if err := m.deviceMaps(s); err != nil {
		return 0, nil, err
	}
	x, err := d.Input(s.X)
	if err != nil {
		return 0, nil, err
	}
	net, err := m.Build(x, s.Maps)
	if err != nil {
		return 0, nil, err
	}
	loss, err := ops.SoftmaxCrossEntropy(net.Logits, s.Batch.Labels)
	if err != nil {
		return 0, nil, err
	}
	var logits, lossV gorgonia.Value
	gorgonia.Read(net.Logits, &logits)
	gorgonia.Read(loss, &lossV)
	vm := gorgonia.NewTapeMachine(net.Graph, d.VMOpt())
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		return 0, nil, fmt.Errorf("unet: forward on %s: %w", d.Name(), err)
	}
	if lv, err = scalar(lossV); err != nil {
		return 0, nil, err
	}
	pred, err = ops.ArgmaxRows(logits)
	return lv, pred, err
}

func scalar(v gorgonia.Value) (float64, error) {
	if v == nil {
		return 0, fmt.Errorf("unet: no value was computed")
	}
	switch d := v.Data().(type) {
	case float64:
		return d, nil
	case float32:
		return float64(d), nil
	}
	return 0, fmt.Errorf("unet: loss is %T, not a scalar", v.Data())
}

// Confusion counts (true, predicted) class pairs.
type Confusion struct {
	K int
	// Counts[t·K + p] is the number of voxels of class t predicted as p.
	Counts []int64
}

// NewConfusion returns an empty K×K confusion matrix.
func NewConfusion(k int) *Confusion { return &Confusion{K: k, Counts: make([]int64, k*k)} }

// Add counts the voxels of one batch. Labels outside [0, K) are skipped.
func (c *Confusion) Add(labels, pred []int32) error {
	if len(labels) != len(pred) {
		return fmt.Errorf("%w: %d labels but %d predictions", ErrConfig, len(labels), len(pred))
	}
	for i, t := range labels {
		p := pred[i]
		if t < 0 || int(t) >= c.K || p < 0 || int(p) >= c.K {
			continue
		}
		c.Counts[int(t)*c.K+int(p)]++
	}
	return nil
}

// Total returns the number of voxels counted.
func (c *Confusion) Total() int64 {
	var n int64
	for _, v := range c.Counts {
		n += v
	}
	return n
}

// Accuracy returns the fraction of voxels predicted correctly (0 if none).
func (c *Confusion) Accuracy() float64 {
	var ok int64
	for k := range c.K {
		ok += c.Counts[k*c.K+k]
	}
	if n := c.Total(); n > 0 {
		return float64(ok) / float64(n)
	}
	return 0
}

// IoU returns the intersection over union of class k, TP / (TP + FP + FN),
// and whether the class occurs at all (in the labels or the predictions).
func (c *Confusion) IoU(k int) (float64, bool) {
	tp := c.Counts[k*c.K+k]
	var fp, fn int64
	for j := range c.K {
		if j != k {
			fn += c.Counts[k*c.K+j]
			fp += c.Counts[j*c.K+k]
		}
	}
	if d := tp + fp + fn; d > 0 {
		return float64(tp) / float64(d), true
	}
	return 0, false
}

// MeanIoU averages IoU over the classes that occur.
func (c *Confusion) MeanIoU() float64 {
	s, n := 0.0, 0
	for k := range c.K {
		if v, ok := c.IoU(k); ok {
			s += v
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return s / float64(n)
}

// Evaluation is the result of Evaluate.
type Evaluation struct {
	Loss      float64 // mean over batches
	Confusion *Confusion
	// Pred holds the predictions of every sample, in order.
	Pred [][]int32
}

// Evaluate prepares and predicts every batch and accumulates the metrics.
func (m *Model) Evaluate(batches []*scenes.Batch, gridSize int) (*Evaluation, error) {
	ev := &Evaluation{Confusion: NewConfusion(m.Config.Classes)}
	order := make([]int, len(batches))
	for i := range order {
		order[i] = i
	}
	samples := m.Prefetch(FromSlice(batches), order, gridSize)
	defer samples.Stop()
	for range batches {
		s, err := samples.Next()
		if err != nil {
			return nil, err
		}
		l, pred, err := m.Predict(s)
		if err != nil {
			return nil, err
		}
		ev.Loss += l / float64(len(batches))
		if err := ev.Confusion.Add(s.Batch.Labels, pred); err != nil {
			return nil, err
		}
		ev.Pred = append(ev.Pred, pred)
	}
	return ev, nil
}

// metadata returns the checkpoint metadata describing the configuration.
func (c Config) metadata() map[string]string {
	return map[string]string{
		"model":       "flexgemm-go sparse unet",
		"in_channels": strconv.Itoa(c.InChannels),
		"channels":    strconv.Itoa(c.Channels),
		"levels":      strconv.Itoa(c.Levels),
		"convs":       strconv.Itoa(c.Convs),
		"classes":     strconv.Itoa(c.Classes),
		"eps":         strconv.FormatFloat(c.Eps, 'g', -1, 64),
		"dtype":       c.DType.String(),
	}
}
