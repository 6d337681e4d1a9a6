//go:build cudaext

package cudaext

// Sparse pooling on the GPU (kernels/pool.cu): the sparse.PoolEngine of
// the CUDA engine. The map's Nbr and Rev tables come from the engine's map
// cache (built on the device by the map builders or uploaded once); the
// gradients are output-stationary over Rev, so every result is
// deterministic without atomics.

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

var _ sparse.PoolEngine = (*Engine)(nil)

// poolSuffix returns the pooling kernels' suffix of dt (floatSuffix), or
// an error naming the dtype.
func poolSuffix(dt sparse.DType) (string, error) {
	if s, ok := floatSuffix(dt); ok {
		return s, nil
	}
	return "", fmt.Errorf("%w: cudaext: pooling of %v data", sparse.ErrDType, dt)
}

func (e *Engine) checkPoolMap(op string, m *kmap.Map) error {
	if err := e.checkMap(op, m); err != nil {
		return err
	}
	if m.V() > 1<<30 {
		return fmt.Errorf("%w: %s: kernel volume %d", sparse.ErrShape, op, m.V())
	}
	return nil
}

// PoolForward implements sparse.PoolEngine: max or average pooling of x
// [m.NIn, C] (Float32, Float16 or BFloat16 on this device) over m. MaxPool
// also returns the argmax input rows [m.NOut, C] Int32 (−1 where an output
// has no neighbour); the semantics are sparse.Pool's (ties to the lowest
// tap, the first NaN wins, empty outputs are 0).
func (e *Engine) PoolForward(m *kmap.Map, x sparse.Matrix, mode sparse.PoolMode) (y, argmax sparse.Matrix, err error) {
	const op = "cudaext: PoolForward"
	if err := e.checkPoolMap(op, m); err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	if err := mode.Valid(); err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	xb, err := e.buffer(x, "x")
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	if x.Rows != m.NIn {
		return sparse.Matrix{}, sparse.Matrix{}, &sparse.ShapeError{Op: "PoolForward", Arg: "x", Want: fmt.Sprintf("[%d, C]", m.NIn), Got: x.Shape()}
	}
	suf, err := poolSuffix(xb.dtype)
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	C := x.Cols
	var yb, ab *Buffer
	err = e.d.do(func() error {
		d := e.d
		var err error
		if yb, err = e.newOutput(xb.dtype, m.NOut*C); err != nil {
			return err
		}
		if mode == sparse.MaxPool {
			if ab, err = d.newBuffer(sparse.Int32, m.NOut*C); err != nil {
				return err
			}
		}
		total := int64(m.NOut) * int64(C)
		if total == 0 {
			return nil
		}
		nbr, err := e.nbrTable(m)
		if err != nil {
			return err
		}
		g, b := d.elementwise(total)
		if mode == sparse.MaxPool {
			return d.launch("pool_max_"+suf, g, b, 0, d.addr(xb.ptr), nbr, int64(m.NOut), int32(m.V()), int64(C), yb.ptr, ab.ptr)
		}
		return d.launch("pool_avg_"+suf, g, b, 0, d.addr(xb.ptr), nbr, int64(m.NOut), int32(m.V()), int64(C), yb.ptr)
	})
	if err != nil {
		yb.Free()
		ab.Free()
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	y = sparse.Matrix{Rows: m.NOut, Cols: C, Data: yb}
	if ab != nil {
		argmax = sparse.Matrix{Rows: m.NOut, Cols: C, Data: ab}
	}
	return y, argmax, nil
}

// PoolGrad implements sparse.PoolEngine: the gradient dx [m.NIn, C] of
// PoolForward given dy [m.NOut, C] (and, for MaxPool, the argmax it
// returned), summed per input row in tap order through the reverse table.
func (e *Engine) PoolGrad(m *kmap.Map, dy, argmax sparse.Matrix, mode sparse.PoolMode) (sparse.Matrix, error) {
	const op = "cudaext: PoolGrad"
	if err := e.checkPoolMap(op, m); err != nil {
		return sparse.Matrix{}, err
	}
	if err := mode.Valid(); err != nil {
		return sparse.Matrix{}, err
	}
	db, err := e.buffer(dy, "dy")
	if err != nil {
		return sparse.Matrix{}, err
	}
	if dy.Rows != m.NOut {
		return sparse.Matrix{}, &sparse.ShapeError{Op: "PoolGrad", Arg: "dy", Want: fmt.Sprintf("[%d, C]", m.NOut), Got: dy.Shape()}
	}
	suf, err := poolSuffix(db.dtype)
	if err != nil {
		return sparse.Matrix{}, err
	}
	C := dy.Cols
	var ab *Buffer
	if mode == sparse.MaxPool {
		if ab, err = e.buffer(argmax, "argmax"); err != nil {
			return sparse.Matrix{}, err
		}
		if ab.dtype != sparse.Int32 || argmax.Rows != m.NOut || argmax.Cols != C {
			return sparse.Matrix{}, fmt.Errorf("%w: %s: argmax is %v %s, want Int32 [%d, %d]", sparse.ErrShape, op, ab.dtype, argmax.Shape(), m.NOut, C)
		}
	}
	var out *Buffer
	err = e.d.do(func() error {
		d := e.d
		var err error
		if out, err = e.newOutput(db.dtype, m.NIn*C); err != nil {
			return err
		}
		total := int64(m.NIn) * int64(C)
		if total == 0 {
			return nil
		}
		rev, err := e.revTable(m)
		if err != nil {
			return err
		}
		V := int32(m.V())
		g, b := d.elementwise(total)
		if mode == sparse.MaxPool {
			return d.launch("pool_max_grad_"+suf, g, b, 0, d.addr(db.ptr), d.addr(ab.ptr), rev, int64(m.NIn), V, int64(C), out.ptr)
		}
		cnt, err := d.allocTemp(int64(max(m.NOut, 1)) * 4)
		if err != nil {
			return err
		}
		defer d.freeTemp(cnt)
		if m.NOut > 0 {
			nbr, err := e.nbrTable(m)
			if err != nil {
				return err
			}
			gc, bc := d.elementwise(int64(m.NOut))
			if err := d.launch("pool_counts", gc, bc, 0, nbr, int64(m.NOut), V, cnt.ptr); err != nil {
				return err
			}
		}
		return d.launch("pool_avg_grad_"+suf, g, b, 0, d.addr(db.ptr), cnt.ptr, rev, int64(m.NIn), V, int64(C), out.ptr)
	})
	if err != nil {
		out.Free()
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: m.NIn, Cols: C, Data: out}, nil
}
