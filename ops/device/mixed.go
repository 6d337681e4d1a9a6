package device

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse"
	"gorgonia.org/tensor"
)

// Harmonize implements the mixed-precision rule for operands of one
// kernel: when act is a device matrix, every other device operand whose
// storage dtype differs from act's is replaced by a copy in act's dtype
// (e.g. a float32 master weight cast to the bfloat16 of the activations
// it multiplies). release frees the copies. Host matrices and zero
// matrices are left alone.
func Harmonize(act sparse.Matrix, others ...*sparse.Matrix) (release func(), err error) {
	st, ok := act.Data.(sparse.Storage)
	if !ok {
		return func() {}, nil
	}
	d := Owner(act)
	if d == nil {
		return func() {}, nil
	}
	dt := st.DType()
	var made []sparse.Matrix
	release = func() { d.Release(made...) }
	for _, p := range others {
		o, ok := p.Data.(sparse.Storage)
		if !ok || o.DType() == dt {
			continue
		}
		c, err := d.Cast(*p, dt)
		if err != nil {
			release()
			return func() {}, err
		}
		made = append(made, c)
		*p = c
	}
	return release, nil
}

// Cast returns a copy of the device matrix m with storage dtype dt (in
// the open step).
func (d *Device) Cast(m sparse.Matrix, dt sparse.DType) (sparse.Matrix, error) {
	c, err := d.Alloc(dt, m.Rows, m.Cols)
	if err != nil {
		return sparse.Matrix{}, err
	}
	if err := d.Run("cast", func(nn NN) error { return nn.Copy(c, m) }); err != nil {
		d.Release(c)
		return sparse.Matrix{}, err
	}
	return c, nil
}

// Master returns a gradient of a parameter in float32: a device matrix
// with float16 or bfloat16 storage is converted (releasing the narrow
// one); anything else is returned as it is.
func Master(m sparse.Matrix) (sparse.Matrix, error) {
	st, ok := m.Data.(sparse.Storage)
	if !ok || st.DType() == sparse.Float32 || st.DType() == sparse.Int32 {
		return m, nil
	}
	d := Owner(m)
	if d == nil {
		return sparse.Matrix{}, fmt.Errorf("%w: %T belongs to no open device", ErrNotDevice, m.Data)
	}
	c, err := d.Cast(m, sparse.Float32)
	if err != nil {
		return sparse.Matrix{}, err
	}
	d.Release(m)
	return c, nil
}

// AddInto adds the device matrix src element-wise into the device tensor
// dst (the LispMachine gradient accumulation of ADOp.DoDiff).
func AddInto(dst *tensor.Dense, src sparse.Matrix) error {
	e, err := lookup(dst)
	if err != nil {
		return err
	}
	if e == nil {
		return fmt.Errorf("%w: gradient tensor is on the host but the update is %T", ErrMixed, src.Data)
	}
	if !e.d.Owns(src) {
		return fmt.Errorf("%w: the update %T is not storage of %s", ErrMixed, src.Data, e.d.name)
	}
	if src.Rows*src.Cols != e.m.Rows {
		return fmt.Errorf("%w: adding %d elements into a gradient of %d", sparse.ErrShape, src.Rows*src.Cols, e.m.Rows)
	}
	view := sparse.Matrix{Rows: src.Rows, Cols: src.Cols, Data: e.m.Data}
	return e.d.Run("add", func(nn NN) error { return nn.Add(view, view, src) })
}
