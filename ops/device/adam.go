package device

import (
	"fmt"
	"math"

	"github.com/flexgemm-go/flexgemm/sparse"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Adam is the Adam optimiser with the update of Gorgonia's AdamSolver
// (same defaults: learning rate 0.001, beta1 0.9, beta2 0.999, eps 1e-8):
//
//	g' = g·gradScale + L2·w
//	m  = beta1·m + (1 − beta1)·g'
//	v  = beta2·v + (1 − beta2)·g'²
//	w -= LR·(m/(1 − beta1^t)) / (√(v/(1 − beta2^t)) + Eps)
//
// It updates parameters in place where they live: device tensors with one
// kernel launch per device for all of them (NN.AdamSteps; moments kept on
// the device in float32, whatever the gradients' storage), host tensors
// on the CPU. Like Gorgonia's
// solvers it keys its state by position, so pass the parameters in the
// same order every step. Unlike them it reads gradients from the values
// of the nodes returned by gorgonia.Grad (no dual values needed), and
// leaves the gradients unchanged.
type Adam struct {
	LR, Beta1, Beta2, Eps, L2 float64

	iter int
	m, v []*tensor.Dense
	dev  []*Device
}

// NewAdam returns an Adam optimiser with learning rate lr and Gorgonia's
// defaults for the rest.
func NewAdam(lr float64) *Adam {
	return &Adam{LR: lr, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
}

// Iterations returns the number of updates applied.
func (a *Adam) Iterations() int { return a.iter }

// Step applies one update to every parameter with its gradient (grads[i]
// the value of the gradient node of params[i]), each gradient multiplied
// by gradScale first (1/loss scale, or 1).
func (a *Adam) Step(params []*tensor.Dense, grads []gorgonia.Value, gradScale float64) error {
	if len(params) != len(grads) {
		return fmt.Errorf("%w: Adam.Step: %d parameters but %d gradients", sparse.ErrShape, len(params), len(grads))
	}
	if a.m == nil {
		a.m = make([]*tensor.Dense, len(params))
		a.v = make([]*tensor.Dense, len(params))
		a.dev = make([]*Device, len(params))
	}
	if len(a.m) != len(params) {
		return fmt.Errorf("%w: Adam.Step: %d parameters, the optimiser has state for %d", sparse.ErrShape, len(params), len(a.m))
	}
	for i, p := range params {
		g := grads[i]
		if p == nil || g == nil {
			return fmt.Errorf("%w: Adam.Step: parameter %d or its gradient is nil (was the gradient graph run?)", ErrNotDevice, i)
		}
		if !p.Shape().Eq(g.Shape()) && p.Shape().TotalSize() != g.Shape().TotalSize() {
			return fmt.Errorf("%w: Adam.Step: parameter %d has shape %v, its gradient %v", sparse.ErrShape, i, p.Shape(), g.Shape())
		}
	}
	a.iter++
	t := float64(a.iter)
	corr1 := 1 / (1 - math.Pow(a.Beta1, t))
	corr2 := 1 / (1 - math.Pow(a.Beta2, t))
	// Device parameters are gathered per device (in order of first
	// appearance) and updated with one AdamSteps launch per device.
	var groups []*adamGroup
	for i, p := range params {
		if !IsDevice(p) {
			if err := a.stepHost(i, p, grads[i], corr1, corr2, gradScale); err != nil {
				return fmt.Errorf("Adam.Step: parameter %d: %w", i, err)
			}
			continue
		}
		d, w, g, m, v, err := a.prepareDevice(i, p, grads[i])
		if err != nil {
			return fmt.Errorf("Adam.Step: parameter %d: %w", i, err)
		}
		var grp *adamGroup
		for _, x := range groups {
			if x.d == d {
				grp = x
			}
		}
		if grp == nil {
			grp = &adamGroup{d: d}
			groups = append(groups, grp)
		}
		grp.ws, grp.gs, grp.ms, grp.vs = append(grp.ws, w), append(grp.gs, g), append(grp.ms, m), append(grp.vs, v)
	}
	for _, grp := range groups {
		if err := grp.d.Run("adam", func(nn NN) error {
			return nn.AdamSteps(grp.ws, grp.gs, grp.ms, grp.vs, float32(a.LR), float32(a.Beta1), float32(a.Beta2), float32(a.Eps),
				float32(corr1), float32(corr2), float32(gradScale), float32(a.L2))
		}); err != nil {
			return fmt.Errorf("Adam.Step: %w", err)
		}
	}
	return nil
}

// adamGroup is the device parameters of one device: their matrices, the
// gradients' and the moments'.
type adamGroup struct {
	d              *Device
	ws, gs, ms, vs []sparse.Matrix
}

// prepareDevice checks device parameter i and its gradient, creates its
// moments on first use (or when the parameter moved to another device)
// and returns the device and the four matrices of its update.
func (a *Adam) prepareDevice(i int, p *tensor.Dense, g gorgonia.Value) (*Device, sparse.Matrix, sparse.Matrix, sparse.Matrix, sparse.Matrix, error) {
	var none sparse.Matrix
	d, err := Of(p)
	if err != nil {
		return nil, none, none, none, none, err
	}
	n := p.Shape().TotalSize()
	w, _, err := MatrixOf(p, n, 1)
	if err != nil {
		return nil, none, none, none, none, err
	}
	if dt, _ := StorageDType(p); dt != sparse.Float32 {
		return nil, none, none, none, none, fmt.Errorf("%w: parameters must have float32 storage (master weights), not %v", sparse.ErrDType, dt)
	}
	gm, gd, err := MatrixOf(g, n, 1)
	if err != nil {
		return nil, none, none, none, none, fmt.Errorf("gradient: %w", err)
	}
	if gd != d {
		return nil, none, none, none, none, fmt.Errorf("%w: parameter on %s, gradient on %s", ErrMixed, d.name, gd.name)
	}
	if a.m[i] == nil || a.dev[i] != d {
		if a.m[i], err = d.persistentZeros(n); err != nil {
			return nil, none, none, none, none, err
		}
		if a.v[i], err = d.persistentZeros(n); err != nil {
			return nil, none, none, none, none, err
		}
		a.dev[i] = d
	}
	m, _, err := MatrixOf(a.m[i], n, 1)
	if err != nil {
		return nil, none, none, none, none, err
	}
	v, _, err := MatrixOf(a.v[i], n, 1)
	if err != nil {
		return nil, none, none, none, none, err
	}
	return d, w, gm, m, v, nil
}

// persistentZeros returns a Float32 [n] tensor of zeros that outlives the
// open step.
func (d *Device) persistentZeros(n int) (*tensor.Dense, error) {
	t, err := d.Zeros(sparse.Float32, n)
	if err != nil {
		return nil, err
	}
	if err := d.Keep(t); err != nil {
		return nil, err
	}
	return t, nil
}

func (a *Adam) stepHost(i int, p *tensor.Dense, g gorgonia.Value, corr1, corr2, gradScale float64) error {
	gt, ok := g.(*tensor.Dense)
	if !ok || IsDevice(gt) {
		return fmt.Errorf("%w: host parameter with a %T gradient", ErrMixed, g)
	}
	if a.m[i] == nil {
		a.m[i] = tensor.New(tensor.Of(p.Dtype()), tensor.WithShape(p.Shape().TotalSize()))
		a.v[i] = tensor.New(tensor.Of(p.Dtype()), tensor.WithShape(p.Shape().TotalSize()))
	}
	switch w := p.Data().(type) {
	case []float32:
		gs, ok := gt.Data().([]float32)
		if !ok {
			return fmt.Errorf("%w: float32 parameter with a %v gradient", sparse.ErrDType, gt.Dtype())
		}
		adamHost(w, gs, a.m[i].Data().([]float32), a.v[i].Data().([]float32), float32(a.LR), float32(a.Beta1), float32(a.Beta2),
			float32(a.Eps), float32(corr1), float32(corr2), float32(gradScale), float32(a.L2))
	case []float64:
		gs, ok := gt.Data().([]float64)
		if !ok {
			return fmt.Errorf("%w: float64 parameter with a %v gradient", sparse.ErrDType, gt.Dtype())
		}
		adamHost(w, gs, a.m[i].Data().([]float64), a.v[i].Data().([]float64), a.LR, a.Beta1, a.Beta2, a.Eps, corr1, corr2, gradScale, a.L2)
	default:
		return fmt.Errorf("%w: a %v parameter", sparse.ErrDType, p.Dtype())
	}
	return nil
}

// adamHost is AdamStep on host slices, in the arithmetic of T.
func adamHost[T float32 | float64](w, g, m, v []T, lr, beta1, beta2, eps, corr1, corr2, gradScale, l2 T) {
	for i, wi := range w {
		gi := g[i]*gradScale + l2*wi
		mi := beta1*m[i] + (1-beta1)*gi
		vi := beta2*v[i] + (1-beta2)*(gi*gi)
		m[i], v[i] = mi, vi
		w[i] = wi + (-lr*(mi*corr1))/(T(math.Sqrt(float64(vi*corr2)))+eps)
	}
}

// AllFinite reports whether every element of the values (tensors of one
// device, or host tensors) is finite. On a device the check runs there
// and only a 4-byte flag is copied back (counted as Scalars).
func (d *Device) AllFinite(vals ...gorgonia.Value) (bool, error) {
	var dev []sparse.Matrix
	for i, v := range vals {
		if v == nil {
			continue
		}
		if IsDevice(v) {
			n := v.Shape().TotalSize()
			m, vd, err := MatrixOf(v, n, 1)
			if err != nil {
				return false, fmt.Errorf("AllFinite: value %d: %w", i, err)
			}
			if vd != d {
				return false, fmt.Errorf("%w: AllFinite on %s of a tensor of %s", ErrMixed, d.name, vd.name)
			}
			dev = append(dev, m)
			continue
		}
		t, ok := v.(*tensor.Dense)
		if !ok {
			return false, fmt.Errorf("%w: AllFinite of %T", ErrNotDevice, v)
		}
		if t.Shape().TotalSize() == 0 {
			continue
		}
		switch s := t.Data().(type) {
		case []float32:
			for _, x := range s {
				if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
					return false, nil
				}
			}
		case []float64:
			for _, x := range s {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return false, nil
				}
			}
		}
	}
	if len(dev) == 0 {
		return true, nil
	}
	flag, err := d.Alloc(sparse.Float32, 1, 1)
	if err != nil {
		return false, err
	}
	defer d.Release(flag)
	if err := d.Run("adam", func(nn NN) error {
		if err := d.mem.Fill(flag, 0); err != nil {
			return err
		}
		return nn.NonFinite(flag, dev...)
	}); err != nil {
		return false, err
	}
	h, err := d.Download(flag, Scalars)
	if err != nil {
		return false, err
	}
	return h.F32()[0] == 0, nil
}

// LossScaler is dynamic loss scaling for float16 training: the loss
// gradient is multiplied by Scale (ops.WithLossScale), and Step divides
// the parameter gradients by it again. A step whose gradients overflowed
// (Inf or NaN) is skipped and the scale is multiplied by Backoff; after
// Interval good steps in a row it is multiplied by Growth.
type LossScaler struct {
	Scale    float64
	Growth   float64
	Backoff  float64
	Interval int
	// Skipped counts the steps skipped because of overflow.
	Skipped int
	good    int
}

// NewLossScaler returns a scaler starting at scale (PyTorch's GradScaler
// defaults otherwise: growth 2, backoff 0.5, interval 2000).
func NewLossScaler(scale float64) *LossScaler {
	return &LossScaler{Scale: scale, Growth: 2, Backoff: 0.5, Interval: 2000}
}

// Step checks the gradients on device d (one 4-byte flag read back) and
// either skips the update (overflow: backs off the scale) or applies the
// optimiser with the gradients unscaled. It reports whether the update
// was applied.
func (s *LossScaler) Step(d *Device, opt *Adam, params []*tensor.Dense, grads []gorgonia.Value) (bool, error) {
	if !(s.Scale > 0) || math.IsInf(s.Scale, 0) {
		return false, fmt.Errorf("%w: loss scale %v", sparse.ErrOptions, s.Scale)
	}
	ok, err := d.AllFinite(grads...)
	if err != nil {
		return false, err
	}
	if !ok {
		s.Skipped++
		s.good = 0
		s.Scale *= s.Backoff
		return false, nil
	}
	if err := opt.Step(params, grads, 1/s.Scale); err != nil {
		return false, err
	}
	s.good++
	if s.Interval > 0 && s.good >= s.Interval {
		s.Scale *= s.Growth
		s.good = 0
	}
	return true, nil
}
