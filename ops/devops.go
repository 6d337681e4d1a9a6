package ops

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Device helpers of the element-wise, normalisation and loss ops: every
// op of this package computes on the host for host values and on the
// device (package ops/device) for device tensors.

// deviceOf returns the device of the values when they are device tensors
// (nil when all are host values) and an error when host and device values
// are mixed or the devices differ.
func deviceOf(op string, vs ...gorgonia.Value) (*device.Device, error) {
	var d *device.Device
	host := false
	for _, v := range vs {
		if v == nil {
			continue
		}
		if !device.IsDevice(v) {
			if _, isTensor := v.(tensor.Tensor); isTensor {
				host = true
			}
			continue
		}
		vd, err := device.Of(v)
		if err != nil {
			return nil, fmt.Errorf("ops.%s: %w", op, err)
		}
		if d != nil && vd != d {
			return nil, fmt.Errorf("%w: ops.%s: operands on %s and %s", device.ErrMixed, op, d.Name(), vd.Name())
		}
		d = vd
	}
	if d != nil && host {
		return nil, fmt.Errorf("%w: ops.%s: host and %s tensors mixed", device.ErrMixed, op, d.Name())
	}
	return d, nil
}

// devMatrix views a device tensor as a [rows, cols] device matrix.
func devMatrix(op, arg string, v gorgonia.Value, rows, cols int) (sparse.Matrix, error) {
	m, _, err := device.MatrixOf(v, rows, cols)
	if err != nil {
		return sparse.Matrix{}, fmt.Errorf("ops.%s: %s: %w", op, arg, err)
	}
	return m, nil
}

// storageDType returns the storage dtype of a device tensor.
func storageDType(v gorgonia.Value) sparse.DType {
	dt, err := device.StorageDType(v)
	if err != nil {
		return sparse.Float32
	}
	return dt
}

// devEmpty allocates an uninitialised device result of the given shape.
func devEmpty(d *device.Device, dt sparse.DType, rows, cols int, shape tensor.Shape) (*tensor.Dense, sparse.Matrix, error) {
	t, m, err := d.Empty(dt, shape.Clone()...)
	if err != nil {
		return nil, sparse.Matrix{}, err
	}
	m.Rows, m.Cols = rows, cols
	return t, m, nil
}

// onDevice reports whether any of vs is a device tensor (the op then
// takes its device path, which reports mixed operands).
func onDevice(vs ...gorgonia.Value) bool {
	for _, v := range vs {
		if v != nil && device.IsDevice(v) {
			return true
		}
	}
	return false
}
