package grad

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/flexgemm-go/flexgemm/internal/opkit"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ErrMismatch reports analytic gradients that disagree with finite
// differences beyond the tolerance.
var ErrMismatch = errors.New("grad: gradient check failed")

// ErrCheck reports a gradient check that could not run: bad inputs, a
// build function that fails, or a cost that is not a float scalar.
var ErrCheck = errors.New("grad: cannot run gradient check")

// BuildFunc builds the function under test in g from inputs (one node per
// input tensor of Check, in the same order, named "input0", "input1", …)
// and returns its cost, a float32 or float64 scalar node. It is called
// several times, each time on a fresh graph; it must build the same
// function every time and leave the cost as the graph's only root (nodes
// without parents), because the LispMachine seeds every root's gradient.
type BuildFunc func(g *gorgonia.ExprGraph, inputs gorgonia.Nodes) (*gorgonia.Node, error)

// CheckOption configures Check.
type CheckOption func(*checkConfig)

type checkConfig struct {
	step       float64
	atol, rtol float64
	stepSet    bool
	tolSet     bool
	lisp       bool
	constants  map[int]bool
}

// WithStep sets the finite-difference step h (default 1e-6 for float64
// inputs, 1e-3 for float32 inputs).
func WithStep(h float64) CheckOption {
	return func(c *checkConfig) { c.step, c.stepSet = h, true }
}

// WithTolerance sets the acceptance test |analytic − numeric| ≤
// atol + rtol·|numeric| per element (default atol 1e-5, rtol 1e-3 for
// float64 inputs, the defaults of torch.autograd.gradcheck; atol 1e-2,
// rtol 1e-2 for float32).
func WithTolerance(atol, rtol float64) CheckOption {
	return func(c *checkConfig) { c.atol, c.rtol, c.tolSet = atol, rtol, true }
}

// WithoutLispMachine skips the LispMachine (ADOp.DoDiff) check; by default
// gradients are checked through both TapeMachine + gorgonia.Grad and the
// LispMachine.
func WithoutLispMachine() CheckOption {
	return func(c *checkConfig) { c.lisp = false }
}

// WithConstants marks inputs (by index) that are not differentiated, such
// as fixed sample points. Inputs whose dtype is not a float are always
// constant.
func WithConstants(idx ...int) CheckOption {
	return func(c *checkConfig) {
		for _, i := range idx {
			c.constants[i] = true
		}
	}
}

// Report is the outcome of Check.
type Report struct {
	// Step is the finite-difference step; ATol and RTol the tolerance.
	Step, ATol, RTol float64
	// Inputs has one entry per input tensor.
	Inputs []InputReport
}

// InputReport compares the gradients of one input.
type InputReport struct {
	// Index is the position of the input; Shape its shape.
	Index int
	Shape tensor.Shape
	// Constant inputs are not differentiated and have no comparisons.
	Constant bool
	// Numeric is the central finite-difference gradient, in float64.
	Numeric []float64
	// Tape compares the gradient from gorgonia.Grad run in a TapeMachine;
	// Lisp the one from a LispMachine (Ran is false when skipped).
	Tape, Lisp Comparison
}

// Comparison holds the errors of one analytic gradient against Numeric.
type Comparison struct {
	// Ran reports whether this comparison was made.
	Ran bool
	// Analytic is the analytic gradient, converted to float64.
	Analytic []float64
	// MaxAbsErr is max |analytic − numeric|; MaxRelErr is
	// max |analytic − numeric| / max(|analytic|, |numeric|) over elements
	// where either is non-zero.
	MaxAbsErr, MaxRelErr float64
	// Worst is the flat index of the element that exceeds the tolerance
	// by the most (or has the largest absolute error when all pass).
	Worst int
	// Pass reports whether every element is within the tolerance.
	Pass bool
}

// OK reports whether every comparison that ran passed.
func (r *Report) OK() bool {
	for _, in := range r.Inputs {
		for _, c := range []Comparison{in.Tape, in.Lisp} {
			if c.Ran && !c.Pass {
				return false
			}
		}
	}
	return true
}

// String summarises the report, one line per input and machine.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "gradient check (h=%g atol=%g rtol=%g)", r.Step, r.ATol, r.RTol)
	for _, in := range r.Inputs {
		if in.Constant {
			fmt.Fprintf(&b, "\n  input %d %v: constant", in.Index, in.Shape)
			continue
		}
		for _, mc := range []struct {
			name string
			c    Comparison
		}{{"tape", in.Tape}, {"lisp", in.Lisp}} {
			if !mc.c.Ran {
				continue
			}
			status := "ok"
			if len(in.Numeric) == 0 {
				fmt.Fprintf(&b, "\n  input %d %v %s: empty", in.Index, in.Shape, mc.name)
				continue
			}
			if !mc.c.Pass {
				status = "FAIL"
			}
			fmt.Fprintf(&b, "\n  input %d %v %s: max abs %.3g max rel %.3g %s (worst [%d]: analytic %.8g numeric %.8g)",
				in.Index, in.Shape, mc.name, mc.c.MaxAbsErr, mc.c.MaxRelErr, status,
				mc.c.Worst, mc.c.Analytic[mc.c.Worst], in.Numeric[mc.c.Worst])
		}
	}
	return b.String()
}

// Check compares the analytic gradients of the cost built by build with
// float64 central finite differences, like torch.autograd.gradcheck. The
// gradient of every float input is computed three ways, each on a fresh
// graph with copies of inputs (which are never modified):
//
//   - numerically: (cost(x + h·e_j) − cost(x − h·e_j)) / 2h for every
//     element j, with a forward-only TapeMachine;
//   - symbolically: gorgonia.Grad and a TapeMachine (SDOp.SymDiff);
//   - automatically: a LispMachine (ADOp.DoDiff), unless
//     WithoutLispMachine is given.
//
// The report gives the largest absolute and relative error per input and
// machine. Check returns the report together with an error wrapping
// ErrMismatch when some element is out of tolerance, or an error wrapping
// ErrCheck when the check cannot run. Use float64 inputs for tight
// tolerances; the number of cost evaluations is twice the number of input
// elements, so keep inputs small.
func Check(build BuildFunc, inputs []*tensor.Dense, opts ...CheckOption) (*Report, error) {
	cfg := checkConfig{lisp: true, constants: map[int]bool{}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if build == nil {
		return nil, fmt.Errorf("%w: nil build function", ErrCheck)
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("%w: no inputs", ErrCheck)
	}
	all64 := true
	for i, in := range inputs {
		if in == nil {
			return nil, fmt.Errorf("%w: input %d is nil", ErrCheck, i)
		}
		if in.Shape().IsScalar() {
			return nil, fmt.Errorf("%w: input %d is a scalar; use a [1] tensor", ErrCheck, i)
		}
		switch in.Dtype() {
		case tensor.Float32:
			if !cfg.constants[i] {
				all64 = false
			}
		case tensor.Float64:
		default:
			cfg.constants[i] = true
		}
	}
	if !cfg.stepSet {
		cfg.step = 1e-6
		if !all64 {
			cfg.step = 1e-3
		}
	}
	if !cfg.tolSet {
		cfg.atol, cfg.rtol = 1e-5, 1e-3
		if !all64 {
			cfg.atol, cfg.rtol = 1e-2, 1e-2
		}
	}
	if !(cfg.step > 0) || math.IsInf(cfg.step, 0) || cfg.atol < 0 || cfg.rtol < 0 {
		return nil, fmt.Errorf("%w: step %g and tolerances (%g, %g) must be positive", ErrCheck, cfg.step, cfg.atol, cfg.rtol)
	}
	rep := &Report{Step: cfg.step, ATol: cfg.atol, RTol: cfg.rtol, Inputs: make([]InputReport, len(inputs))}
	var wrt []int
	for i, in := range inputs {
		rep.Inputs[i] = InputReport{Index: i, Shape: in.Shape().Clone(), Constant: cfg.constants[i]}
		if !cfg.constants[i] {
			wrt = append(wrt, i)
		}
	}
	if len(wrt) == 0 {
		return rep, nil
	}

	if err := numericGrads(build, inputs, wrt, cfg.step, rep); err != nil {
		return rep, err
	}
	tape, err := tapeGrads(build, inputs, wrt)
	if err != nil {
		return rep, err
	}
	for k, i := range wrt {
		rep.Inputs[i].Tape = compare(tape[k], rep.Inputs[i].Numeric, cfg.atol, cfg.rtol)
	}
	if cfg.lisp {
		lisp, err := lispGrads(build, inputs, wrt)
		if err != nil {
			return rep, err
		}
		for k, i := range wrt {
			rep.Inputs[i].Lisp = compare(lisp[k], rep.Inputs[i].Numeric, cfg.atol, cfg.rtol)
		}
	}
	if !rep.OK() {
		return rep, fmt.Errorf("%w: %s", ErrMismatch, rep)
	}
	return rep, nil
}

// newInputs builds a fresh graph with one node per input, each bound to a
// copy of the input.
func newInputs(inputs []*tensor.Dense) (*gorgonia.ExprGraph, gorgonia.Nodes, []*tensor.Dense) {
	g := gorgonia.NewGraph()
	nodes := make(gorgonia.Nodes, len(inputs))
	vals := make([]*tensor.Dense, len(inputs))
	for i, in := range inputs {
		vals[i] = in.Clone().(*tensor.Dense)
		nodes[i] = gorgonia.NewTensor(g, in.Dtype(), in.Dims(), gorgonia.WithShape(in.Shape().Clone()...),
			gorgonia.WithValue(vals[i]), gorgonia.WithName(fmt.Sprintf("input%d", i)))
	}
	return g, nodes, vals
}

func buildCost(build BuildFunc, g *gorgonia.ExprGraph, nodes gorgonia.Nodes) (*gorgonia.Node, error) {
	cost, err := build(g, nodes)
	if err != nil {
		return nil, fmt.Errorf("%w: build: %w", ErrCheck, err)
	}
	if cost == nil {
		return nil, fmt.Errorf("%w: build returned a nil cost", ErrCheck)
	}
	if !cost.IsScalar() || (cost.Dtype() != tensor.Float32 && cost.Dtype() != tensor.Float64) {
		return nil, fmt.Errorf("%w: cost must be a float scalar, got %v of shape %v", ErrCheck, cost.Dtype(), cost.Shape())
	}
	return cost, nil
}

// numericGrads fills rep.Inputs[i].Numeric for every i in wrt.
func numericGrads(build BuildFunc, inputs []*tensor.Dense, wrt []int, h float64, rep *Report) error {
	g, nodes, vals := newInputs(inputs)
	cost, err := buildCost(build, g, nodes)
	if err != nil {
		return err
	}
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	eval := func() (float64, error) {
		defer vm.Reset()
		if err := vm.RunAll(); err != nil {
			return 0, fmt.Errorf("%w: forward: %w", ErrCheck, err)
		}
		return scalarOf(cost.Value())
	}
	for _, i := range wrt {
		num := make([]float64, vals[i].Shape().TotalSize())
		data, err := opkit.Data(vals[i], fmt.Sprintf("input %d", i))
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCheck, err)
		}
		switch d := data.(type) {
		case []float64:
			err = centralDiff(d, num, h, eval)
		case []float32:
			err = centralDiff(d, num, h, eval)
		default:
			err = fmt.Errorf("%w: input %d has dtype %v", ErrCheck, i, vals[i].Dtype())
		}
		if err != nil {
			return err
		}
		rep.Inputs[i].Numeric = num
	}
	return nil
}

func centralDiff[T float32 | float64](x []T, num []float64, h float64, eval func() (float64, error)) error {
	for j := range num {
		orig := x[j]
		plus, minus := T(float64(orig)+h), T(float64(orig)-h)
		x[j] = plus
		fp, err := eval()
		if err != nil {
			return err
		}
		x[j] = minus
		fm, err := eval()
		if err != nil {
			return err
		}
		x[j] = orig
		// Divide by the perturbation actually stored (it differs from 2h
		// after rounding to float32).
		num[j] = (fp - fm) / (float64(plus) - float64(minus))
	}
	return nil
}

func scalarOf(v gorgonia.Value) (float64, error) {
	if v == nil {
		return 0, fmt.Errorf("%w: cost has no value", ErrCheck)
	}
	switch d := v.Data().(type) {
	case float64:
		return d, nil
	case float32:
		return float64(d), nil
	case []float64:
		if len(d) == 1 {
			return d[0], nil
		}
	case []float32:
		if len(d) == 1 {
			return float64(d[0]), nil
		}
	}
	return 0, fmt.Errorf("%w: cost value %T is not a float scalar", ErrCheck, v.Data())
}

func float64s(v gorgonia.Value, n int) ([]float64, error) {
	if v == nil {
		return nil, fmt.Errorf("%w: gradient has no value", ErrCheck)
	}
	out := make([]float64, n)
	if n == 0 {
		return out, nil
	}
	switch d := v.Data().(type) {
	case []float64:
		if len(d) >= n {
			copy(out, d)
			return out, nil
		}
	case []float32:
		if len(d) >= n {
			for j := range out {
				out[j] = float64(d[j])
			}
			return out, nil
		}
	case float64:
		if n == 1 {
			out[0] = d
			return out, nil
		}
	case float32:
		if n == 1 {
			out[0] = float64(d)
			return out, nil
		}
	}
	return nil, fmt.Errorf("%w: gradient value %T does not hold %d floats", ErrCheck, v.Data(), n)
}

// tapeGrads returns the gradients of the inputs in wrt from gorgonia.Grad
// run in a TapeMachine.
func tapeGrads(build BuildFunc, inputs []*tensor.Dense, wrt []int) ([][]float64, error) {
	g, nodes, _ := newInputs(inputs)
	cost, err := buildCost(build, g, nodes)
	if err != nil {
		return nil, err
	}
	wrtNodes := make(gorgonia.Nodes, len(wrt))
	for k, i := range wrt {
		wrtNodes[k] = nodes[i]
	}
	grads, err := gorgonia.Grad(cost, wrtNodes...)
	if err != nil {
		return nil, fmt.Errorf("%w: gorgonia.Grad: %w", ErrCheck, err)
	}
	vm := gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(wrtNodes...))
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		return nil, fmt.Errorf("%w: TapeMachine: %w", ErrCheck, err)
	}
	out := make([][]float64, len(wrt))
	for k, i := range wrt {
		if out[k], err = float64s(grads[k].Value(), inputs[i].Shape().TotalSize()); err != nil {
			return nil, fmt.Errorf("input %d: %w", i, err)
		}
	}
	return out, nil
}

// lispGrads returns the gradients of the inputs in wrt from a LispMachine
// running forward and backward (ADOp.DoDiff).
func lispGrads(build BuildFunc, inputs []*tensor.Dense, wrt []int) ([][]float64, error) {
	g, nodes, _ := newInputs(inputs)
	if _, err := buildCost(build, g, nodes); err != nil {
		return nil, err
	}
	vm := gorgonia.NewLispMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		return nil, fmt.Errorf("%w: LispMachine: %w", ErrCheck, err)
	}
	out := make([][]float64, len(wrt))
	for k, i := range wrt {
		gv, err := nodes[i].Grad()
		if err != nil {
			return nil, fmt.Errorf("%w: LispMachine gradient of input %d: %w", ErrCheck, i, err)
		}
		if out[k], err = float64s(gv, inputs[i].Shape().TotalSize()); err != nil {
			return nil, fmt.Errorf("input %d: %w", i, err)
		}
	}
	return out, nil
}

func compare(analytic, numeric []float64, atol, rtol float64) Comparison {
	c := Comparison{Ran: true, Analytic: analytic, Pass: true}
	worstExcess := math.Inf(-1)
	for j, a := range analytic {
		n := numeric[j]
		d := math.Abs(a - n)
		if math.IsNaN(d) {
			d = math.Inf(1)
		}
		if d > c.MaxAbsErr {
			c.MaxAbsErr = d
		}
		if s := math.Max(math.Abs(a), math.Abs(n)); s > 0 {
			c.MaxRelErr = math.Max(c.MaxRelErr, d/s)
		}
		excess := d - (atol + rtol*math.Abs(n))
		if excess > 0 {
			c.Pass = false
		}
		if excess > worstExcess {
			worstExcess, c.Worst = excess, j
		}
	}
	return c
}
