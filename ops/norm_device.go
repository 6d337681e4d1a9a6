package ops

import (
	"fmt"
	"sync"

	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The device path of VoxelNorm: the statistics and both directions run as
// kernels of the tensors' device (device.NN); activations keep their
// storage dtype, gamma/beta gradients are float32.

// normStatsKey identifies the statistics of one VoxelNorm input within a
// step: the forward computes them, the gradient ops of the same node
// read the same (unchanged, live) x and reuse them instead of a second
// pass over x.
type normStatsKey struct {
	x    sparse.Storage
	eps  float64
	step uint64
}

// normStats is the per-channel mean and 1/√(var + eps) (Float32 [1, C],
// owned by the step).
type normStats struct{ mean, inv sparse.Matrix }

// normStatsCache keeps the statistics of the open steps; entries of other
// steps are dropped when a new one is stored.
var normStatsCache = struct {
	sync.Mutex
	m map[normStatsKey]normStats
}{m: map[normStatsKey]normStats{}}

// cachedNormStats returns the statistics of x stored by a forward of the
// open step, if any.
func cachedNormStats(d *device.Device, x sparse.Matrix, eps float64) (normStats, bool) {
	step := d.StepID()
	if step == 0 {
		return normStats{}, false
	}
	normStatsCache.Lock()
	defer normStatsCache.Unlock()
	s, ok := normStatsCache.m[normStatsKey{x: x.Data.(sparse.Storage), eps: eps, step: step}]
	return s, ok
}

// storeNormStats records the statistics of x for the open step.
func storeNormStats(step uint64, x sparse.Matrix, eps float64, s normStats) {
	normStatsCache.Lock()
	defer normStatsCache.Unlock()
	for k := range normStatsCache.m {
		if k.step != step {
			delete(normStatsCache.m, k) // their memory went with their step
		}
	}
	normStatsCache.m[normStatsKey{x: x.Data.(sparse.Storage), eps: eps, step: step}] = s
}

// allocStats allocates the two Float32 [1, c] statistics matrices.
func allocStats(d *device.Device, c int) (mean, inv sparse.Matrix, err error) {
	if mean, err = d.Alloc(sparse.Float32, 1, c); err != nil {
		return
	}
	if inv, err = d.Alloc(sparse.Float32, 1, c); err != nil {
		d.Release(mean)
	}
	return
}

// voxelNormDevice is VoxelNorm on device tensors: the result has x's
// storage dtype.
func voxelNormDevice(eps float64, xv, gv, bv gorgonia.Value, n, c int) (gorgonia.Value, error) {
	d, err := deviceOf("VoxelNorm", xv, gv, bv)
	if err != nil {
		return nil, err
	}
	x, err := devMatrix("VoxelNorm", "x", xv, n, c)
	if err != nil {
		return nil, err
	}
	g, err := devMatrix("VoxelNorm", "gamma", gv, 1, c)
	if err != nil {
		return nil, err
	}
	b, err := devMatrix("VoxelNorm", "beta", bv, 1, c)
	if err != nil {
		return nil, err
	}
	mean, inv, err := allocStats(d, c)
	if err != nil {
		return nil, err
	}
	// Inside a step the statistics are kept for the gradient ops (they go
	// with the step); outside one they are freed here.
	step := d.StepID()
	if step == 0 {
		defer d.Release(mean, inv)
	}
	out, y, err := devEmpty(d, storageDType(xv), n, c, xv.Shape())
	if err != nil {
		return nil, err
	}
	if err := d.Run("norm", func(nn device.NN) error {
		if err := nn.NormStats(mean, inv, x, eps); err != nil {
			return err
		}
		return nn.NormForward(y, x, g, b, mean, inv)
	}); err != nil {
		return nil, err
	}
	if step != 0 {
		storeNormStats(step, x, eps, normStats{mean: mean, inv: inv})
	}
	return out, nil
}

// normGradKey identifies the inputs of VoxelNorm's gradient ops: the
// three ops of one VoxelNorm node (dx, dgamma, dbeta) read the same device
// buffers, which stay unchanged between them (they are live inputs).
type normGradKey struct {
	x, gamma, dy sparse.Storage
	eps          float64
	step         uint64
}

// normGradSums holds what the three gradient ops share: the statistics
// and the column sums dgamma, dbeta (Float32 [1, C], owned by the step).
type normGradSums struct {
	mean, inv, dg, db sparse.Matrix
}

// normGradCache keeps the shared results of the open steps; entries of
// other steps are dropped when a new one is stored.
var normGradCache = struct {
	sync.Mutex
	m map[normGradKey]*normGradSums
}{m: map[normGradKey]*normGradSums{}}

// normGradShared returns the statistics and column sums for the inputs,
// computing them on first use inside a step (and each time outside one).
// release frees them when they are not cached.
func normGradShared(d *device.Device, eps float64, x, g, dy sparse.Matrix) (*normGradSums, func(), error) {
	key := normGradKey{x: x.Data.(sparse.Storage), gamma: g.Data.(sparse.Storage), dy: dy.Data.(sparse.Storage), eps: eps, step: d.StepID()}
	if key.step != 0 {
		normGradCache.Lock()
		s := normGradCache.m[key]
		normGradCache.Unlock()
		if s != nil {
			return s, func() {}, nil
		}
	}
	c := x.Cols
	// The statistics come from the forward of this step when it stored
	// them (same x, same kernel: the same bits), else they are computed
	// here, in the same device operation as the column sums.
	st, cached := cachedNormStats(d, x, eps)
	s := &normGradSums{mean: st.mean, inv: st.inv}
	free := func() { d.Release(s.dg, s.db) }
	var err error
	if !cached {
		if s.mean, s.inv, err = allocStats(d, c); err != nil {
			return nil, nil, err
		}
		free = func() { d.Release(s.mean, s.inv, s.dg, s.db) }
	}
	if s.dg, err = d.Alloc(sparse.Float32, 1, c); err == nil {
		s.db, err = d.Alloc(sparse.Float32, 1, c)
	}
	if err == nil {
		err = d.Run("norm", func(nn device.NN) error {
			if !cached {
				if err := nn.NormStats(s.mean, s.inv, x, eps); err != nil {
					return err
				}
			}
			return nn.NormBackward(sparse.Matrix{}, s.dg, s.db, x, g, dy, s.mean, s.inv)
		})
	}
	if err != nil {
		free()
		return nil, nil, err
	}
	if key.step == 0 {
		return s, free, nil
	}
	normGradCache.Lock()
	for k := range normGradCache.m {
		if k.step != key.step {
			delete(normGradCache.m, k) // their memory went with their step
		}
	}
	normGradCache.m[key] = s
	normGradCache.Unlock()
	return s, func() {}, nil
}

// voxelNormGradDevice returns gradient wrt of VoxelNorm on device tensors:
// dx in x's storage dtype, dgamma or dbeta in float32. Within a step the
// three gradient ops of one VoxelNorm share the statistics and column sums.
func voxelNormGradDevice(eps float64, wrt int, xv, gv, dyv gorgonia.Value) (gorgonia.Value, error) {
	d, err := deviceOf("VoxelNormGrad", xv, gv, dyv)
	if err != nil {
		return nil, err
	}
	n, c, err := normShapes("VoxelNormGrad", xv.Shape(), gv.Shape())
	if err != nil {
		return nil, err
	}
	if !dyv.Shape().Eq(xv.Shape()) {
		return nil, &sparse.ShapeError{Op: "VoxelNormGrad", Arg: "dy", Want: fmt.Sprint(xv.Shape()), Got: fmt.Sprint(dyv.Shape())}
	}
	x, err := devMatrix("VoxelNormGrad", "x", xv, n, c)
	if err != nil {
		return nil, err
	}
	g, err := devMatrix("VoxelNormGrad", "gamma", gv, 1, c)
	if err != nil {
		return nil, err
	}
	dy, err := devMatrix("VoxelNormGrad", "dy", dyv, n, c)
	if err != nil {
		return nil, err
	}
	s, release, err := normGradShared(d, eps, x, g, dy)
	if err != nil {
		return nil, err
	}
	defer release()
	if wrt > 0 {
		src := s.dg
		if wrt == 2 {
			src = s.db
		}
		out, m, err := devEmpty(d, sparse.Float32, 1, c, tensor.Shape{c})
		if err != nil {
			return nil, err
		}
		if err := d.Run("norm", func(nn device.NN) error { return nn.Copy(m, src) }); err != nil {
			return nil, err
		}
		return out, nil
	}
	out, dx, err := devEmpty(d, storageDType(xv), n, c, xv.Shape())
	if err != nil {
		return nil, err
	}
	// The column sums are recomputed with dx (one pass over x and dy);
	// the shared ones stay untouched for the other two ops.
	dg, err := d.Alloc(sparse.Float32, 1, c)
	if err != nil {
		return nil, err
	}
	db, err := d.Alloc(sparse.Float32, 1, c)
	if err != nil {
		d.Release(dg)
		return nil, err
	}
	defer d.Release(dg, db)
	if err := d.Run("norm", func(nn device.NN) error { return nn.NormBackward(dx, dg, db, x, g, dy, s.mean, s.inv) }); err != nil {
		return nil, err
	}
	return out, nil
}
