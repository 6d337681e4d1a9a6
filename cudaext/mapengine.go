//go:build cudaext

package cudaext

import "github.com/flexgemm-go/flexgemm/sparse"

// The engine builds every kernel map of a sparse UNet on the device:
// sparse.SubmanifoldMapOf, StridedMapOf and TransposedMapOf of device
// coordinates, and sparse.InverseMapOf of a strided map built here (its
// Source, the engine's tableSource, is a sparse.MapSource naming the
// engine). The builders keep the coordinates in the map cache without a
// copy (keepCoords: a host upload is taken over, a device buffer borrowed,
// see Buffer), so a map outlives the coordinate matrix it was built from:
// coordinates uploaded inside a training step may be freed at its end
// while the maps are used in later steps.
var (
	_ sparse.MapEngine = (*Engine)(nil)
	_ sparse.MapSource = (*tableSource)(nil)
)

// MapEngine implements sparse.MapSource: the engine that holds the tables
// of the maps it built, so that their inverses are built there too.
func (s *tableSource) MapEngine() sparse.MapEngine { return s.e }
