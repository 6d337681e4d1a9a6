package ops

import (
	"fmt"

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
	mean, inv, err := normStatsDevice(d, x, eps)
	if err != nil {
		return nil, err
	}
	defer d.Release(mean, inv)
	out, y, err := devEmpty(d, storageDType(xv), n, c, xv.Shape())
	if err != nil {
		return nil, err
	}
	if err := d.Run("norm", func(nn device.NN) error { return nn.NormForward(y, x, g, b, mean, inv) }); err != nil {
		return nil, err
	}
	return out, nil
}

// voxelNormGradDevice returns gradient wrt of VoxelNorm on device tensors:
// dx in x's storage dtype, dgamma or dbeta in float32.
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
	mean, inv, err := normStatsDevice(d, x, eps)
	if err != nil {
		return nil, err
	}
	defer d.Release(mean, inv)
	// dgamma and dbeta are computed by every call (dx needs both).
	var out *tensor.Dense
	var dx, dg, db sparse.Matrix
	var tmp []sparse.Matrix
	for i := range 3 {
		var m sparse.Matrix
		if i == wrt {
			shape := tensor.Shape{c}
			rows, cols, dt := 1, c, sparse.Float32
			if i == 0 {
				shape, rows, cols, dt = xv.Shape(), n, c, storageDType(xv)
			}
			if out, m, err = devEmpty(d, dt, rows, cols, shape); err != nil {
				d.Release(tmp...)
				return nil, err
			}
		} else if i > 0 {
			if m, err = d.Alloc(sparse.Float32, 1, c); err != nil {
				d.Release(tmp...)
				return nil, err
			}
			tmp = append(tmp, m)
		}
		switch i {
		case 0:
			dx = m
		case 1:
			dg = m
		default:
			db = m
		}
	}
	defer d.Release(tmp...)
	if err := d.Run("norm", func(nn device.NN) error { return nn.NormBackward(dx, dg, db, x, g, dy, mean, inv) }); err != nil {
		return nil, err
	}
	return out, nil
}
