package device

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// The Fake builds kernel maps of its coordinates as the CPU would: it
// copies the coordinates to the host (an emulation's shortcut, not counted
// as a transfer; a GPU backend builds them on the device) and runs the
// builders of package kmap through package sparse, so the maps, their
// errors and their sentinels are the host builders'. The maps are host
// maps and hold their own copy of the coordinates, so they outlive the
// coordinate matrices (e.g. coordinates uploaded inside a step and
// released at its end).

// hostCoords returns a host copy of a coordinate matrix of this device, or
// the matrix itself when it is host data (left to package sparse to check).
func (f *Fake) hostCoords(m sparse.Matrix, arg string) (sparse.Matrix, error) {
	if _, ok := m.Data.(sparse.Storage); !ok {
		return m, nil
	}
	b, err := f.buf(m, arg)
	if err != nil {
		return sparse.Matrix{}, err
	}
	if b.dt != sparse.Int32 {
		return sparse.Matrix{}, fmt.Errorf("%w: %s: %s are %v, want int32", sparse.ErrDType, f.name, arg, b.dt)
	}
	return sparse.Matrix{Rows: m.Rows, Cols: m.Cols, Data: append(make([]int32, 0, b.n), b.i32...)}, nil
}

// SubmanifoldMap implements sparse.MapEngine with kmap.NewSubmanifold on a
// host copy of coords.
func (f *Fake) SubmanifoldMap(coords sparse.Matrix, ext sparse.Extent, kernel, dilation [3]int) (*kmap.Map, error) {
	hc, err := f.hostCoords(coords, "coordinates")
	if err != nil {
		return nil, err
	}
	return sparse.SubmanifoldMapOf(hc, ext, kernel, dilation)
}

// StridedMap implements sparse.MapEngine with kmap.NewStrided on host
// copies of coords and outCoords (the zero Matrix: outputs generated).
func (f *Fake) StridedMap(coords sparse.Matrix, ext sparse.Extent, conv grid.Conv, outCoords sparse.Matrix) (*kmap.Map, error) {
	hc, err := f.hostCoords(coords, "coordinates")
	if err != nil {
		return nil, err
	}
	var ho sparse.Matrix
	if !outCoords.IsZero() {
		if ho, err = f.hostCoords(outCoords, "output coordinates"); err != nil {
			return nil, err
		}
	}
	return sparse.StridedMapOf(hc, ext, conv, ho)
}

// TransposedMap implements sparse.MapEngine with kmap.NewTransposed on a
// host copy of coords.
func (f *Fake) TransposedMap(coords sparse.Matrix, ext sparse.Extent, conv grid.Conv) (*kmap.Map, error) {
	hc, err := f.hostCoords(coords, "coordinates")
	if err != nil {
		return nil, err
	}
	return sparse.TransposedMapOf(hc, ext, conv)
}

// InverseMap implements sparse.MapEngine with kmap.NewInverse (the Fake's
// maps are host maps).
func (f *Fake) InverseMap(m *kmap.Map) (*kmap.Map, error) {
	return sparse.InverseMap(m)
}

var _ sparse.MapEngine = (*Fake)(nil)
