package sparse

import (
	"fmt"
	"sync"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// ConvOptions tunes how a convolution runs. The zero value is Auto with the
// engine's defaults.
type ConvOptions struct {
	// Algorithm selects the GEMM formulation.
	Algorithm Algorithm
	// SplitK is the number of reduction chunks of the split-K algorithms;
	// 0 lets the engine choose. It is ignored by the other algorithms.
	SplitK int
	// TileRows is the number of output rows per tile of the implicit and
	// masked algorithms; 0 lets the engine choose.
	TileRows int
	// NarrowWeightGrad asks ConvWeightGrad to round the weight gradient
	// of float16/bfloat16 inputs to the inputs' dtype. By default that
	// gradient is returned in float32, straight from the float32
	// accumulators: mixed-precision training keeps float32 master weights
	// and wants float32 gradients of them, and a float16 result would
	// also overflow above 65504 under a large loss scale. Engines without
	// narrow dtypes (the CPU engine) ignore it.
	NarrowWeightGrad bool
}

// WeightGradDType returns the dtype ConvWeightGrad gives for inputs of
// dtype dt: float32 for float16/bfloat16 inputs unless narrow
// (ConvOptions.NarrowWeightGrad) is set, dt otherwise. Engines with narrow
// dtypes follow it; the CPU engine has none.
func WeightGradDType(dt DType, narrow bool) DType {
	if !narrow && (dt == Float16 || dt == BFloat16) {
		return Float32
	}
	return dt
}

// ConvEngine computes sparse convolutions over a kernel map m with V taps.
// Shapes: x [m.NIn, Ci], w [Co, V·Ci] (the weight [Co, Kx, Ky, Kz, Ci]
// flattened), bias [1, Co] or the zero Matrix, dy [m.NOut, Co]. Arguments
// have been validated by the caller (package-level functions such as Conv).
type ConvEngine interface {
	// ConvForward returns y [NOut, Co] with
	// y[o] = bias + Σ_v w[:, v, :] · x[Nbr[o,v]].
	ConvForward(m *kmap.Map, x, w, bias Matrix, opt ConvOptions) (Matrix, error)
	// ConvInputGrad returns dx [NIn, Ci] = Σ_v w[:, v, :]ᵀ · dy[Rev[i,v]].
	ConvInputGrad(m *kmap.Map, dy, w Matrix, opt ConvOptions) (Matrix, error)
	// ConvWeightGrad returns dw [Co, V·Ci] with
	// dw[:, v, :] = Σ_{(i,o) ∈ pairs(v)} dy[o] ⊗ x[i]. An engine with
	// float16/bfloat16 data returns dw of such inputs in float32 unless
	// opt.NarrowWeightGrad is set.
	ConvWeightGrad(m *kmap.Map, x, dy Matrix, opt ConvOptions) (Matrix, error)
	// BiasGrad returns db [1, Co], the column sums of dy; an engine with
	// float16/bfloat16 data returns db of such dy in float32.
	BiasGrad(dy Matrix) (Matrix, error)
}

// ParamGradEngine is an optional extension of ConvEngine: ConvParamGrads
// returns what ConvWeightGrad and BiasGrad return for the same x and dy,
// which an engine may compute in one pass over dy (the CUDA engine sums
// the bias gradient in the weight gradient's centre tap). Its arguments
// have been validated by ConvParamGrads.
type ParamGradEngine interface {
	ConvParamGrads(m *kmap.Map, x, dy Matrix, opt ConvOptions) (dw, db Matrix, err error)
}

// MatrixFreer is an optional extension of Engine for engines whose
// matrices hold memory the garbage collector does not reclaim (device
// buffers; the CUDA engine implements it). Free releases the matrices the
// engine owns and ignores the others. A function of this package that
// fails after the engine returned a matrix to it (ConvParamGrads without
// ParamGradEngine: the bias gradient failing after the weight gradient)
// hands that matrix back through Free, so an error leaks no device memory.
type MatrixFreer interface {
	Free(ms ...Matrix)
}

// PoolEngine computes sparse pooling over a kernel map m. Shapes: x
// [m.NIn, C], dy [m.NOut, C], argmax [m.NOut, C] Int32. Arguments have been
// validated by the caller (Pool, PoolGrad).
type PoolEngine interface {
	// PoolForward returns y [NOut, C] and, for MaxPool, the argmax input
	// rows [NOut, C] Int32 (the zero Matrix for AvgPool).
	PoolForward(m *kmap.Map, x Matrix, mode PoolMode) (y, argmax Matrix, err error)
	// PoolGrad returns dx [NIn, C]; argmax is the zero Matrix for AvgPool.
	PoolGrad(m *kmap.Map, dy, argmax Matrix, mode PoolMode) (Matrix, error)
}

// SampleEngine samples features at the query points of a SamplePlan.
// Shapes: feats [N, C], dy [M, C]. Arguments have been validated by the
// caller (GridSample, GridSampleGrad).
type SampleEngine interface {
	// GridSampleForward returns out [M, C].
	GridSampleForward(p *SamplePlan, feats Matrix) (Matrix, error)
	// GridSampleGrad returns dFeats [N, C] and dPoints [M, 3] (the zero
	// Matrix when feats is the zero Matrix).
	GridSampleGrad(p *SamplePlan, feats, dy Matrix) (dFeats, dPoints Matrix, err error)
}

// Engine runs the primitives of this package on one kind of memory.
type Engine interface {
	// Name identifies the engine, e.g. "cpu" or "cuda:0".
	Name() string
	// Owns reports whether the engine can compute on m's data.
	Owns(m Matrix) bool
	ConvEngine
	PoolEngine
	SampleEngine
}

var (
	enginesMu sync.RWMutex
	engines   []Engine
)

// Register adds an engine. Engines registered later are asked first, so a
// device engine takes its own buffers before the CPU engine is consulted.
func Register(e Engine) {
	enginesMu.Lock()
	defer enginesMu.Unlock()
	engines = append([]Engine{e}, engines...)
}

// Engines returns the registered engines, most recently registered first.
func Engines() []Engine {
	enginesMu.RLock()
	defer enginesMu.RUnlock()
	return append([]Engine(nil), engines...)
}

// EngineFor returns the engine that owns every non-zero matrix in ms.
func EngineFor(ms ...Matrix) (Engine, error) {
	enginesMu.RLock()
	defer enginesMu.RUnlock()
	for _, e := range engines {
		ok := true
		for _, m := range ms {
			if !m.IsZero() && !e.Owns(m) {
				ok = false
				break
			}
		}
		if ok {
			return e, nil
		}
	}
	kinds := make([]string, 0, len(ms))
	for _, m := range ms {
		kinds = append(kinds, fmt.Sprintf("%T", m.Data))
	}
	return nil, fmt.Errorf("%w: no single engine holds %v (mixed host and device data?)", ErrNoEngine, kinds)
}
