package sparse

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/cpu"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// hostPrimitives implements PoolEngine and SampleEngine on host slices
// with the kernels of package cpu.
type hostPrimitives struct{}

// poolEngineFor returns the engine that owns every matrix in ms.
func poolEngineFor(ms ...Matrix) (PoolEngine, error) { return EngineFor(ms...) }

// sampleEngineFor returns the engine that owns every matrix in ms.
func sampleEngineFor(ms ...Matrix) (SampleEngine, error) { return EngineFor(ms...) }

// PoolForward implements PoolEngine on host memory.
func (hostPrimitives) PoolForward(m *kmap.Map, x Matrix, mode PoolMode) (y, argmax Matrix, err error) {
	if err := loadMap("Pool", m); err != nil {
		return Matrix{}, Matrix{}, err
	}
	switch d := x.Data.(type) {
	case []float32:
		y, argmax = poolHost(m, d, x.Cols, mode)
	case []float64:
		y, argmax = poolHost(m, d, x.Cols, mode)
	default:
		return Matrix{}, Matrix{}, fmt.Errorf("%w: cpu: Pool of %T", ErrDType, x.Data)
	}
	return y, argmax, nil
}

// loadMap brings the host tables of a map built on a device to the host
// (kmap.Map.Load) and checks the table's length.
func loadMap(op string, m *kmap.Map) error {
	if err := m.Load(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrShape, op, err)
	}
	return checkMap(op, m)
}

func poolHost[T float32 | float64](m *kmap.Map, x []T, c int, mode PoolMode) (Matrix, Matrix) {
	y := make([]T, m.NOut*c)
	if mode == AvgPool {
		cpu.AvgPool(m, x, c, y)
		return Matrix{Rows: m.NOut, Cols: c, Data: y}, Matrix{}
	}
	arg := make([]int32, m.NOut*c)
	cpu.MaxPool(m, x, c, y, arg)
	return Matrix{Rows: m.NOut, Cols: c, Data: y}, Matrix{Rows: m.NOut, Cols: c, Data: arg}
}

// PoolGrad implements PoolEngine on host memory.
func (hostPrimitives) PoolGrad(m *kmap.Map, dy, argmax Matrix, mode PoolMode) (Matrix, error) {
	if err := loadMap("PoolGrad", m); err != nil {
		return Matrix{}, err
	}
	switch d := dy.Data.(type) {
	case []float32:
		return poolGradHost(m, d, argmax, dy.Cols, mode)
	case []float64:
		return poolGradHost(m, d, argmax, dy.Cols, mode)
	}
	return Matrix{}, fmt.Errorf("%w: cpu: PoolGrad of %T", ErrDType, dy.Data)
}

func poolGradHost[T float32 | float64](m *kmap.Map, dy []T, argmax Matrix, c int, mode PoolMode) (Matrix, error) {
	dx := make([]T, m.NIn*c)
	if mode == AvgPool {
		cpu.AvgPoolGrad(m, dy, nil, c, dx)
	} else {
		arg := argmax.I32()
		if arg == nil {
			return Matrix{}, fmt.Errorf("%w: cpu: PoolGrad argmax of %T", ErrDType, argmax.Data)
		}
		cpu.MaxPoolGrad(m, dy, arg, c, dx)
	}
	return Matrix{Rows: m.NIn, Cols: c, Data: dx}, nil
}

// GridSampleForward implements SampleEngine on host memory.
func (hostPrimitives) GridSampleForward(p *SamplePlan, feats Matrix) (Matrix, error) {
	c := feats.Cols
	switch d := feats.Data.(type) {
	case []float32:
		out := make([]float32, p.Queries()*c)
		cpu.GridSample(p.p, d, c, out)
		return Matrix{Rows: p.Queries(), Cols: c, Data: out}, nil
	case []float64:
		out := make([]float64, p.Queries()*c)
		cpu.GridSample(p.p, d, c, out)
		return Matrix{Rows: p.Queries(), Cols: c, Data: out}, nil
	}
	return Matrix{}, fmt.Errorf("%w: cpu: GridSample of %T", ErrDType, feats.Data)
}

// GridSampleGrad implements SampleEngine on host memory.
func (hostPrimitives) GridSampleGrad(p *SamplePlan, feats, dy Matrix) (dFeats, dPoints Matrix, err error) {
	switch d := dy.Data.(type) {
	case []float32:
		f, _ := feats.Data.([]float32)
		return sampleGradHost(p, f, feats.IsZero(), d, dy.Cols)
	case []float64:
		f, _ := feats.Data.([]float64)
		return sampleGradHost(p, f, feats.IsZero(), d, dy.Cols)
	}
	return Matrix{}, Matrix{}, fmt.Errorf("%w: cpu: GridSampleGrad of %T", ErrDType, dy.Data)
}

func sampleGradHost[T float32 | float64](p *SamplePlan, feats []T, noFeats bool, dy []T, c int) (Matrix, Matrix, error) {
	df := make([]T, p.Voxels()*c)
	cpu.GridSampleFeatGrad(p.p, dy, c, df)
	dFeats := Matrix{Rows: p.Voxels(), Cols: c, Data: df}
	if noFeats {
		return dFeats, Matrix{}, nil
	}
	if feats == nil && p.Voxels()*c > 0 {
		return Matrix{}, Matrix{}, fmt.Errorf("%w: cpu: GridSampleGrad: feats and dy differ in dtype", ErrDType)
	}
	dp := make([]float64, 3*p.Queries())
	cpu.GridSamplePointGrad(p.p, feats, dy, c, dp)
	if p.PointsDType() == Float64 {
		return dFeats, Matrix{Rows: p.Queries(), Cols: 3, Data: dp}, nil
	}
	dp32 := make([]float32, len(dp))
	for j, v := range dp {
		dp32[j] = float32(v)
	}
	return dFeats, Matrix{Rows: p.Queries(), Cols: 3, Data: dp32}, nil
}
