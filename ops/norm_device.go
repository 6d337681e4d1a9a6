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

// normStatsDevice computes the per-channel mean and 1/√(var + eps) of a
// device matrix x into two new Float32 [1, C] matrices.
func normStatsDevice(d *device.Device, x sparse.Matrix, eps float64) (mean, inv sparse.Matrix, err error) {
	if mean, err = d.Alloc(sparse.Float32, 1, x.Cols); err != nil {
		return
	}
	if inv, err = d.Alloc(sparse.Float32, 1, x.Cols); err != nil {
		d.Release(mean)
		return
	}
	if err = d.Run("norm", func(nn device.NN) error { return nn.NormStats(mean, inv, x, eps) }); err != nil {
		d.Release(mean, inv)
	}
	return
}

// voxelNormDevice is VoxelNorm (with relu: followed by ReLU, in the same
// kernel) on device tensors: the result has x's storage dtype.
func voxelNormDevice(eps float64, relu bool, xv, gv, bv gorgonia.Value, n, c int) (gorgonia.Value, error) {
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
	mean, inv, err := normStatsDevice(d, x, eps)
	if err != nil {
		return nil, err
	}
	defer d.Release(mean, inv)
	out, y, err := devEmpty(d, storageDType(xv), n, c, xv.Shape())
	if err != nil {
		return nil, err
	}
	if err := d.Run("norm", func(nn device.NN) error {
		if relu {
			return nn.NormForwardReLU(y, x, g, b, mean, inv)
		}
		return nn.NormForward(y, x, g, b, mean, inv)
	}); err != nil {
		return nil, err
	}
	return out, nil
}

// normGradKey identifies the inputs of VoxelNorm's gradient ops: the
// three ops of one VoxelNorm node (dx, dgamma, dbeta) read the same device
// buffers, which stay unchanged between them (they are live inputs). beta
// is nil without a fused ReLU.
type normGradKey struct {
	x, gamma, beta, dy sparse.Storage
	eps                float64
	step               uint64
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

// normBackward runs the backward kernel: of VoxelNorm, or of VoxelNorm
// followed by ReLU when b is not the zero Matrix.
func normBackward(nn device.NN, dx, dg, db, x, g, b, dy, mean, inv sparse.Matrix) error {
	if b.IsZero() {
		return nn.NormBackward(dx, dg, db, x, g, dy, mean, inv)
	}
	return nn.NormBackwardReLU(dx, dg, db, x, g, b, dy, mean, inv)
}

// normGradShared returns the statistics and column sums for the inputs,
// computing them on first use inside a step (and each time outside one).
// release frees them when they are not cached. b is beta with a fused
// ReLU, the zero Matrix without.
func normGradShared(d *device.Device, eps float64, x, g, b, dy sparse.Matrix) (*normGradSums, func(), error) {
	key := normGradKey{x: x.Data.(sparse.Storage), gamma: g.Data.(sparse.Storage), dy: dy.Data.(sparse.Storage), eps: eps, step: d.StepID()}
	if !b.IsZero() {
		key.beta = b.Data.(sparse.Storage)
	}
	if key.step != 0 {
		normGradCache.Lock()
		s := normGradCache.m[key]
		normGradCache.Unlock()
		if s != nil {
			return s, func() {}, nil
		}
	}
	c := x.Cols
	mean, inv, err := normStatsDevice(d, x, eps)
	if err != nil {
		return nil, nil, err
	}
	s := &normGradSums{mean: mean, inv: inv}
	free := func() { d.Release(s.mean, s.inv, s.dg, s.db) }
	if s.dg, err = d.Alloc(sparse.Float32, 1, c); err == nil {
		s.db, err = d.Alloc(sparse.Float32, 1, c)
	}
	if err == nil {
		err = d.Run("norm", func(nn device.NN) error {
			return normBackward(nn, sparse.Matrix{}, s.dg, s.db, x, g, b, dy, s.mean, s.inv)
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
// dx in x's storage dtype, dgamma or dbeta in float32. A non-nil bv (beta)
// makes it the gradient of VoxelNorm followed by ReLU. Within a step the
// three gradient ops of one VoxelNorm share the statistics and column sums.
func voxelNormGradDevice(eps float64, wrt int, xv, gv, bv, dyv gorgonia.Value) (gorgonia.Value, error) {
	vals := []gorgonia.Value{xv, gv, dyv}
	vecs := []tensor.Shape{gv.Shape()}
	if bv != nil {
		vals = append(vals, bv)
		vecs = append(vecs, bv.Shape())
	}
	d, err := deviceOf("VoxelNormGrad", vals...)
	if err != nil {
		return nil, err
	}
	n, c, err := normShapes("VoxelNormGrad", xv.Shape(), vecs...)
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
	var b sparse.Matrix
	if bv != nil {
		if b, err = devMatrix("VoxelNormGrad", "beta", bv, 1, c); err != nil {
			return nil, err
		}
	}
	s, release, err := normGradShared(d, eps, x, g, b, dy)
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
	if err := d.Run("norm", func(nn device.NN) error { return normBackward(nn, dx, dg, db, x, g, b, dy, s.mean, s.inv) }); err != nil {
		return nil, err
	}
	return out, nil
}
