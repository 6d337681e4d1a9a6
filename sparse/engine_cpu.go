package sparse

import (
	"errors"
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/cpu"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// cpuEngine computes on host slices ([]float32, []float64; []int32 for
// indices) with the pure-Go kernels of package cpu. It is registered first,
// so it is the default and is asked after any device engine. Pooling and
// grid sampling come from the embedded host primitives.
type cpuEngine struct{ hostPrimitives }

func init() { Register(cpuEngine{}) }

// Name implements Engine.
func (cpuEngine) Name() string { return "cpu" }

// Owns implements Engine: the CPU engine owns every host slice.
func (cpuEngine) Owns(m Matrix) bool {
	switch m.Data.(type) {
	case []float32, []float64, []int32:
		return true
	}
	return false
}

// cpuAlgorithms maps each Algorithm onto the CPU method of the same name.
var cpuAlgorithms = map[Algorithm]cpu.Method{
	Auto:                 cpu.Auto,
	Explicit:             cpu.Explicit,
	Implicit:             cpu.Implicit,
	ImplicitSplitK:       cpu.ImplicitSplitK,
	MaskedImplicit:       cpu.Masked,
	MaskedImplicitSplitK: cpu.MaskedSplitK,
}

// cpuOptions translates ConvOptions. Auto becomes cpu.Auto, which resolves
// to the masked implicit GEMM (no work on absent neighbours), or to the
// explicit GEMM when the per-tap reduction is 16 channels or fewer (see
// cpu.Options.Resolve).
func cpuOptions(op string, opt ConvOptions) (cpu.Options, error) {
	if err := opt.validate(); err != nil {
		return cpu.Options{}, fmt.Errorf("sparse: cpu: %s: %w", op, err)
	}
	o := cpu.Options{Method: cpuAlgorithms[opt.Algorithm], SplitK: opt.SplitK, TileRows: opt.TileRows}
	if err := o.Validate(); err != nil {
		return cpu.Options{}, fmt.Errorf("%w: %s: %w", ErrOptions, op, err)
	}
	return o, nil
}

// cpuError gives an error of package cpu the matching sentinel of this
// package, keeping the original in the chain.
func cpuError(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, cpu.ErrOptions):
		return fmt.Errorf("%w: %s: %w", ErrOptions, op, err)
	default: // cpu.ErrShape, cpu.ErrMap
		return fmt.Errorf("%w: %s: %w", ErrShape, op, err)
	}
}

// hostData returns m's data as a []T, or an ErrDType error naming arg.
func hostData[T float32 | float64](op, arg string, m Matrix) ([]T, error) {
	d, ok := m.Data.([]T)
	if !ok {
		var z T
		return nil, fmt.Errorf("%w: cpu: %s: %s is %T, want []%T", ErrDType, op, arg, m.Data, z)
	}
	return d, nil
}

// ConvForward implements ConvEngine.
func (cpuEngine) ConvForward(m *kmap.Map, x, w, bias Matrix, opt ConvOptions) (Matrix, error) {
	const op = "Conv"
	o, err := cpuOptions(op, opt)
	if err != nil {
		return Matrix{}, err
	}
	switch x.Data.(type) {
	case []float32:
		return convForward[float32](m, x, w, bias, o)
	case []float64:
		return convForward[float64](m, x, w, bias, o)
	}
	return Matrix{}, fmt.Errorf("%w: cpu: %s of %T", ErrDType, op, x.Data)
}

func convForward[T float32 | float64](m *kmap.Map, x, w, bias Matrix, o cpu.Options) (Matrix, error) {
	const op = "Conv"
	if m == nil {
		return Matrix{}, fmt.Errorf("%w: %s: nil kernel map", ErrShape, op)
	}
	xd, err := hostData[T](op, "x", x)
	if err != nil {
		return Matrix{}, err
	}
	wd, err := hostData[T](op, "weight", w)
	if err != nil {
		return Matrix{}, err
	}
	var bd []T
	if !bias.IsZero() {
		if bd, err = hostData[T](op, "bias", bias); err != nil {
			return Matrix{}, err
		}
	}
	y := make([]T, m.NOut*w.Rows)
	if err := cpu.Forward(m, xd, x.Cols, wd, w.Rows, bd, y, o); err != nil {
		return Matrix{}, cpuError(op, err)
	}
	return Matrix{Rows: m.NOut, Cols: w.Rows, Data: y}, nil
}

// ConvInputGrad implements ConvEngine.
func (cpuEngine) ConvInputGrad(m *kmap.Map, dy, w Matrix, opt ConvOptions) (Matrix, error) {
	const op = "ConvInputGrad"
	o, err := cpuOptions(op, opt)
	if err != nil {
		return Matrix{}, err
	}
	switch dy.Data.(type) {
	case []float32:
		return convInputGrad[float32](m, dy, w, o)
	case []float64:
		return convInputGrad[float64](m, dy, w, o)
	}
	return Matrix{}, fmt.Errorf("%w: cpu: %s of %T", ErrDType, op, dy.Data)
}

func convInputGrad[T float32 | float64](m *kmap.Map, dy, w Matrix, o cpu.Options) (Matrix, error) {
	const op = "ConvInputGrad"
	if m == nil || m.V() <= 0 || w.Cols%m.V() != 0 {
		return Matrix{}, fmt.Errorf("%w: %s: weight %s does not fit the kernel map", ErrShape, op, w.Shape())
	}
	dyd, err := hostData[T](op, "dy", dy)
	if err != nil {
		return Matrix{}, err
	}
	wd, err := hostData[T](op, "weight", w)
	if err != nil {
		return Matrix{}, err
	}
	ci := w.Cols / m.V()
	dx := make([]T, m.NIn*ci)
	if err := cpu.InputGrad(m, dyd, dy.Cols, wd, ci, dx, o); err != nil {
		return Matrix{}, cpuError(op, err)
	}
	return Matrix{Rows: m.NIn, Cols: ci, Data: dx}, nil
}

// ConvWeightGrad implements ConvEngine.
func (cpuEngine) ConvWeightGrad(m *kmap.Map, x, dy Matrix, opt ConvOptions) (Matrix, error) {
	const op = "ConvWeightGrad"
	o, err := cpuOptions(op, opt)
	if err != nil {
		return Matrix{}, err
	}
	switch x.Data.(type) {
	case []float32:
		return convWeightGrad[float32](m, x, dy, o)
	case []float64:
		return convWeightGrad[float64](m, x, dy, o)
	}
	return Matrix{}, fmt.Errorf("%w: cpu: %s of %T", ErrDType, op, x.Data)
}

func convWeightGrad[T float32 | float64](m *kmap.Map, x, dy Matrix, o cpu.Options) (Matrix, error) {
	const op = "ConvWeightGrad"
	if m == nil {
		return Matrix{}, fmt.Errorf("%w: %s: nil kernel map", ErrShape, op)
	}
	xd, err := hostData[T](op, "x", x)
	if err != nil {
		return Matrix{}, err
	}
	dyd, err := hostData[T](op, "dy", dy)
	if err != nil {
		return Matrix{}, err
	}
	cols := m.V() * x.Cols
	dw := make([]T, dy.Cols*cols)
	if err := cpu.WeightGrad(m, xd, x.Cols, dyd, dy.Cols, dw, o); err != nil {
		return Matrix{}, cpuError(op, err)
	}
	return Matrix{Rows: dy.Cols, Cols: cols, Data: dw}, nil
}

// BiasGrad implements ConvEngine.
func (cpuEngine) BiasGrad(dy Matrix) (Matrix, error) {
	const op = "BiasGrad"
	switch d := dy.Data.(type) {
	case []float32:
		return biasGrad(d, dy.Cols)
	case []float64:
		return biasGrad(d, dy.Cols)
	}
	return Matrix{}, fmt.Errorf("%w: cpu: %s of %T", ErrDType, op, dy.Data)
}

func biasGrad[T float32 | float64](dy []T, co int) (Matrix, error) {
	db := make([]T, co)
	if err := cpu.BiasGrad(dy, co, db); err != nil {
		return Matrix{}, cpuError("BiasGrad", err)
	}
	return Matrix{Rows: 1, Cols: co, Data: db}, nil
}
