package sparse

import (
	"fmt"
)

// DType is the element type of a Matrix.
type DType int

// Element types. Host matrices are Float32, Float64 or Int32; Float16 and
// BFloat16 exist only inside device engines.
const (
	Float32 DType = iota
	Float64
	Int32
	Float16
	BFloat16
)

// String implements fmt.Stringer for DType.
func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float64:
		return "float64"
	case Int32:
		return "int32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Size returns the number of bytes of one element.
func (d DType) Size() int {
	switch d {
	case Float64:
		return 8
	case Float16, BFloat16:
		return 2
	}
	return 4
}

// Float is the constraint satisfied by host floating-point element types.
type Float interface{ ~float32 | ~float64 }

// Storage is implemented by engine-owned (device) buffers that a Matrix can
// hold instead of a host slice.
type Storage interface {
	// DType returns the element type of the buffer.
	DType() DType
	// Len returns the number of elements.
	Len() int
}

// Matrix is a row-major [Rows, Cols] array. Data is a []float32, []float64
// or []int32 of length Rows·Cols for host matrices, or a Storage owned by an
// engine. The zero Matrix is an empty matrix with no data ("absent", e.g.
// no bias).
type Matrix struct {
	Rows, Cols int
	Data       any
}

// NewMatrix returns a zeroed host matrix of the given shape.
func NewMatrix[T Float | ~int32](rows, cols int) Matrix {
	return Matrix{Rows: rows, Cols: cols, Data: make([]T, rows*cols)}
}

// MatrixOf wraps data as a [rows, cols] host matrix without copying. It
// fails when len(data) != rows·cols.
func MatrixOf[T Float | ~int32](rows, cols int, data []T) (Matrix, error) {
	if rows < 0 || cols < 0 || len(data) != rows*cols {
		return Matrix{}, fmt.Errorf("%w: %d elements cannot be a [%d, %d] matrix", ErrShape, len(data), rows, cols)
	}
	return Matrix{Rows: rows, Cols: cols, Data: data}, nil
}

// IsZero reports whether m is the zero Matrix (no data at all).
func (m Matrix) IsZero() bool { return m.Data == nil && m.Rows == 0 && m.Cols == 0 }

// DType returns the element type of m, or an error for unsupported data.
func (m Matrix) DType() (DType, error) {
	switch d := m.Data.(type) {
	case []float32:
		return Float32, nil
	case []float64:
		return Float64, nil
	case []int32:
		return Int32, nil
	case Storage:
		return d.DType(), nil
	}
	return 0, fmt.Errorf("%w: matrix data of type %T", ErrDType, m.Data)
}

// Len returns the number of stored elements, or −1 for unsupported data.
func (m Matrix) Len() int {
	switch d := m.Data.(type) {
	case []float32:
		return len(d)
	case []float64:
		return len(d)
	case []int32:
		return len(d)
	case Storage:
		return d.Len()
	}
	return -1
}

// Validate checks that the data type is supported and holds exactly
// Rows·Cols elements.
func (m Matrix) Validate() error {
	if _, err := m.DType(); err != nil {
		return err
	}
	if m.Rows < 0 || m.Cols < 0 || m.Len() != m.Rows*m.Cols {
		return fmt.Errorf("%w: [%d, %d] matrix holds %d elements", ErrShape, m.Rows, m.Cols, m.Len())
	}
	return nil
}

// F32 returns the host float32 data, or nil if m holds another type.
func (m Matrix) F32() []float32 { d, _ := m.Data.([]float32); return d }

// F64 returns the host float64 data, or nil if m holds another type.
func (m Matrix) F64() []float64 { d, _ := m.Data.([]float64); return d }

// I32 returns the host int32 data, or nil if m holds another type.
func (m Matrix) I32() []int32 { d, _ := m.Data.([]int32); return d }

// Shape returns the shape as a string such as "[3, 4]".
func (m Matrix) Shape() string { return fmt.Sprintf("[%d, %d]", m.Rows, m.Cols) }

// Float64s returns a float64 copy of a host float matrix's data.
func (m Matrix) Float64s() ([]float64, error) {
	switch d := m.Data.(type) {
	case []float64:
		return append([]float64(nil), d...), nil
	case []float32:
		out := make([]float64, len(d))
		for i, v := range d {
			out[i] = float64(v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: Float64s of %T", ErrDType, m.Data)
}
