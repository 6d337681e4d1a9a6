package sparse

import (
	"errors"
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// ErrMode reports an unknown pooling or sampling mode.
var ErrMode = errors.New("sparse: unknown mode")

// PoolMode selects the reduction of Pool.
type PoolMode int

// The pooling reductions.
const (
	// MaxPool takes the per-channel maximum over the present neighbours;
	// ties go to the lowest tap.
	MaxPool PoolMode = iota
	// AvgPool takes the per-channel mean over the present neighbours.
	AvgPool
)

// String implements fmt.Stringer for PoolMode.
func (p PoolMode) String() string {
	switch p {
	case MaxPool:
		return "max"
	case AvgPool:
		return "avg"
	}
	return fmt.Sprintf("PoolMode(%d)", int(p))
}

// Valid reports whether p is a known pooling mode.
func (p PoolMode) Valid() error {
	if p != MaxPool && p != AvgPool {
		return fmt.Errorf("%w: pooling mode %d", ErrMode, int(p))
	}
	return nil
}

// Pool pools x over the kernel map m, normally a strided map such as
// kernel 2, stride 2 (kmap.NewStrided), one output row per output site:
//
//	MaxPool: y[o, c] = max_{v : i = m.Nbr[o, v] ≥ 0} x[i, c],  argmax[o, c] = that i
//	AvgPool: y[o, c] = (1/n_o) Σ_{v : i = m.Nbr[o, v] ≥ 0} x[i, c]
//
// where n_o is the number of present neighbours of output o: absent sites
// of the window do not count (unlike a dense average pool over zero
// padding). MaxPool breaks ties by the lowest tap v, propagates NaN (the
// first NaN in tap order wins) and returns the argmax as a [m.NOut, C]
// Int32 matrix of input rows for PoolGrad; AvgPool returns the zero Matrix
// as argmax. An output row without neighbours (possible with maps whose
// output coordinates were given) gets 0, and argmax −1.
//
// Shapes: x [m.NIn, C] float32 or float64; y [m.NOut, C] of x's dtype.
func Pool(m *kmap.Map, x Matrix, mode PoolMode) (y, argmax Matrix, err error) {
	if err := checkMap("Pool", m); err != nil {
		return Matrix{}, Matrix{}, err
	}
	if err := mode.Valid(); err != nil {
		return Matrix{}, Matrix{}, err
	}
	if err := checkMatrix("Pool", "x", x, m.NIn, -1); err != nil {
		return Matrix{}, Matrix{}, err
	}
	if err := floatDType("Pool", "x", x); err != nil {
		return Matrix{}, Matrix{}, err
	}
	e, err := poolEngineFor(x)
	if err != nil {
		return Matrix{}, Matrix{}, err
	}
	return e.PoolForward(m, x, mode)
}

// PoolGrad returns the gradient dx [m.NIn, C] of Pool with respect to x,
// given dy [m.NOut, C]:
//
//	MaxPool: dx[i, c] = Σ_{o : argmax[o, c] = i} dy[o, c]
//	AvgPool: dx[i, c] = Σ_{o, v : m.Nbr[o, v] = i} dy[o, c] / n_o
//
// argmax is the [m.NOut, C] Int32 matrix returned by Pool with MaxPool; it
// is ignored (and may be the zero Matrix) for AvgPool. Every dx row is
// summed by one worker in a fixed order through m.Reverse(), so the result
// is deterministic.
func PoolGrad(m *kmap.Map, dy, argmax Matrix, mode PoolMode) (Matrix, error) {
	if err := checkMap("PoolGrad", m); err != nil {
		return Matrix{}, err
	}
	if err := mode.Valid(); err != nil {
		return Matrix{}, err
	}
	if err := checkMatrix("PoolGrad", "dy", dy, m.NOut, -1); err != nil {
		return Matrix{}, err
	}
	if err := floatDType("PoolGrad", "dy", dy); err != nil {
		return Matrix{}, err
	}
	if mode == AvgPool {
		e, err := poolEngineFor(dy)
		if err != nil {
			return Matrix{}, err
		}
		return e.PoolGrad(m, dy, Matrix{}, mode)
	}
	if argmax.IsZero() {
		return Matrix{}, fmt.Errorf("%w: PoolGrad: MaxPool needs the argmax matrix returned by Pool", ErrShape)
	}
	if err := checkMatrix("PoolGrad", "argmax", argmax, m.NOut, dy.Cols); err != nil {
		return Matrix{}, err
	}
	if d, _ := argmax.DType(); d != Int32 {
		return Matrix{}, fmt.Errorf("%w: PoolGrad: argmax is %v, want int32", ErrDType, d)
	}
	e, err := poolEngineFor(dy, argmax)
	if err != nil {
		return Matrix{}, err
	}
	return e.PoolGrad(m, dy, argmax, mode)
}

// floatDType checks that m holds float32 or float64 data.
func floatDType(op, arg string, m Matrix) error {
	d, err := m.DType()
	if err != nil {
		return err
	}
	if d == Int32 {
		return fmt.Errorf("%w: %s: %s is int32, want a floating-point type", ErrDType, op, arg)
	}
	return nil
}
