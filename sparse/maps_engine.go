package sparse

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// MapEngine builds kernel maps from [N, 4] Int32 coordinate matrices that
// the engine holds, with the semantics of kmap.NewSubmanifold,
// kmap.NewStrided and kmap.NewTransposed, and the inverse of a strided map
// it built, with the semantics of kmap.NewInverse. The CUDA engine
// implements it, so every map of a sparse UNet over device-resident
// coordinates is built on the device.
//
// A map an engine builds must stay usable after the coordinate matrices it
// was built from are freed: the engine copies what it keeps.
type MapEngine interface {
	SubmanifoldMap(coords Matrix, ext Extent, kernel, dilation [3]int) (*kmap.Map, error)
	StridedMap(coords Matrix, ext Extent, conv grid.Conv, outCoords Matrix) (*kmap.Map, error)
	TransposedMap(coords Matrix, ext Extent, conv grid.Conv) (*kmap.Map, error)
	// InverseMap builds the map of kmap.NewInverse(m) for a strided map m
	// (typically one this engine built and whose tables it holds).
	InverseMap(m *kmap.Map) (*kmap.Map, error)
}

// MapSource is implemented by the kmap.TableSource of the maps an engine
// builds (kmap.Map.Source): it names the engine that holds the map's
// tables, so that maps derived from the map (InverseMapOf) are built there
// too.
type MapSource interface {
	kmap.TableSource
	// MapEngine returns the engine that holds the tables.
	MapEngine() MapEngine
}

// SubmanifoldMapOf is SubmanifoldMap for coordinates held in a [N, 4] Int32
// matrix wherever they live: host coordinates are mapped by package kmap,
// coordinates owned by an engine that implements MapEngine by that engine.
func SubmanifoldMapOf(coords Matrix, ext Extent, kernel, dilation [3]int) (*kmap.Map, error) {
	if host, err := hostCoords("SubmanifoldMapOf", coords); err != nil || host != nil {
		if err != nil {
			return nil, err
		}
		m, err := kmap.NewSubmanifold(host, ext, kernel, dilation)
		return m, mapError("SubmanifoldMapOf", err)
	}
	me, err := mapEngineFor("SubmanifoldMapOf", coords)
	if err != nil {
		return nil, err
	}
	return me.SubmanifoldMap(coords, ext, kernel, dilation)
}

// StridedMapOf is StridedMap for coordinates held in a [N, 4] Int32 matrix
// wherever they live; outCoords is the zero Matrix (outputs generated) or
// a [M, 4] Int32 matrix on the same engine.
func StridedMapOf(coords Matrix, ext Extent, conv grid.Conv, outCoords Matrix) (*kmap.Map, error) {
	if host, err := hostCoords("StridedMapOf", coords); err != nil || host != nil {
		if err != nil {
			return nil, err
		}
		var out []int32
		if !outCoords.IsZero() {
			if out, err = hostCoords("StridedMapOf", outCoords); err != nil {
				return nil, err
			}
			if out == nil {
				return nil, fmt.Errorf("%w: StridedMapOf: host coordinates with output coordinates of %T", ErrNoEngine, outCoords.Data)
			}
		}
		m, err := kmap.NewStrided(host, ext, conv, out)
		return m, mapError("StridedMapOf", err)
	}
	me, err := mapEngineFor("StridedMapOf", coords, outCoords)
	if err != nil {
		return nil, err
	}
	return me.StridedMap(coords, ext, conv, outCoords)
}

// TransposedMapOf is TransposedMap for coordinates held in a [N, 4] Int32
// matrix wherever they live.
func TransposedMapOf(coords Matrix, ext Extent, conv grid.Conv) (*kmap.Map, error) {
	if host, err := hostCoords("TransposedMapOf", coords); err != nil || host != nil {
		if err != nil {
			return nil, err
		}
		m, err := kmap.NewTransposed(host, ext, conv)
		return m, mapError("TransposedMapOf", err)
	}
	me, err := mapEngineFor("TransposedMapOf", coords)
	if err != nil {
		return nil, err
	}
	return me.TransposedMap(coords, ext, conv)
}

// InverseMapOf is InverseMap for a strided map wherever its tables live:
// a map whose Source is a MapSource (built by an engine that keeps its
// tables, such as the CUDA engine) is inverted by that engine, without
// copying its tables to the host; any other map by kmap.NewInverse. A nil
// map or a map of another kind gives kmap.NewInverse's error (wrapping
// kmap.ErrMap and ErrShape).
func InverseMapOf(m *kmap.Map) (*kmap.Map, error) {
	const op = "InverseMapOf"
	if m == nil || m.Kind != kmap.Strided {
		_, err := kmap.NewInverse(m)
		return nil, mapError(op, err)
	}
	if src, ok := m.Source.(MapSource); ok {
		if me := src.MapEngine(); me != nil {
			inv, err := me.InverseMap(m)
			return inv, mapError(op, err)
		}
	}
	inv, err := kmap.NewInverse(m)
	return inv, mapError(op, err)
}

// hostCoords returns the data of a host [N, 4] Int32 coordinate matrix, nil
// (and no error) for a matrix some engine holds, or a shape/dtype error.
func hostCoords(op string, coords Matrix) ([]int32, error) {
	if err := coords.Validate(); err != nil {
		return nil, fmt.Errorf("sparse: %s: coordinates: %w", op, err)
	}
	if dt, _ := coords.DType(); dt != Int32 {
		return nil, fmt.Errorf("%w: %s: coordinates are %v, want int32", ErrDType, op, dt)
	}
	if coords.Cols != 4 {
		return nil, &ShapeError{Op: op, Arg: "coords", Want: "[N, 4]", Got: coords.Shape()}
	}
	if d, ok := coords.Data.([]int32); ok {
		if d == nil {
			d = []int32{}
		}
		return d, nil
	}
	return nil, nil
}

func mapEngineFor(op string, ms ...Matrix) (MapEngine, error) {
	e, err := EngineFor(ms...)
	if err != nil {
		return nil, err
	}
	me, ok := e.(MapEngine)
	if !ok {
		return nil, fmt.Errorf("%w: %s: engine %s cannot build kernel maps", ErrNoEngine, op, e.Name())
	}
	return me, nil
}
