package sparse

import (
	"errors"
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// SubmanifoldMap builds the kernel map of a submanifold convolution over t:
// the outputs are t's voxels in t's row order, and tap v of output o reads
// the voxel at t.Coord(o) + (k(v) − ⌊K/2⌋)·dilation, if active. Kernel
// sizes must be odd (a wrapped grid.ErrBadGeometry otherwise). Build the
// map once and share it between all layers with the same coordinates,
// kernel and dilation. See kmap.NewSubmanifold.
func SubmanifoldMap(t *Tensor, kernel, dilation [3]int) (*kmap.Map, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: SubmanifoldMap of a nil tensor", ErrShape)
	}
	m, err := kmap.NewSubmanifold(t.Coords, t.Extent, kernel, dilation)
	return m, mapError("SubmanifoldMap", err)
}

// StridedMap builds the kernel map of a strided sparse convolution
// (torch.nn.Conv3d on the active voxels of t) with geometry conv. The
// output grid is conv.StridedExtent(t.Extent). With outCoords nil the
// outputs are every output site that some voxel of t reaches, sorted by
// (batch, x, y, z); otherwise they are outCoords (flat [M, 4], unique,
// inside the output grid, any order). Tap v of output o reads the voxel at
// out[o]·stride − padding + k(v)·dilation. Any kernel size works. The
// map's Out and OutCoords describe the output tensor. See kmap.NewStrided.
func StridedMap(t *Tensor, conv grid.Conv, outCoords []int32) (*kmap.Map, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: StridedMap of a nil tensor", ErrShape)
	}
	m, err := kmap.NewStrided(t.Coords, t.Extent, conv, outCoords)
	return m, mapError("StridedMap", err)
}

// InverseMap builds the map that undoes the strided map strided: from its
// outputs back to exactly its input voxels, in their row order (the decoder
// half of a UNet), including inputs no window reached. It shares the
// strided map's tables (no search). See kmap.NewInverse.
func InverseMap(strided *kmap.Map) (*kmap.Map, error) {
	m, err := kmap.NewInverse(strided)
	return m, mapError("InverseMap", err)
}

// TransposedMap builds the kernel map of a sparse transposed convolution
// (torch.nn.ConvTranspose3d on the active voxels of t, no output padding)
// with geometry conv: the output grid is conv.TransposedExtent(t.Extent)
// and the outputs are every site in·stride − padding + k·dilation it
// contains, sorted by (batch, x, y, z). See kmap.NewTransposed.
func TransposedMap(t *Tensor, conv grid.Conv) (*kmap.Map, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: TransposedMap of a nil tensor", ErrShape)
	}
	m, err := kmap.NewTransposed(t.Coords, t.Extent, conv)
	return m, mapError("TransposedMap", err)
}

// mapErrorKinds pairs kmap's sentinel errors with this package's.
var mapErrorKinds = []struct{ kmap, sparse error }{
	{kmap.ErrDuplicate, ErrDuplicate},
	{kmap.ErrOutOfRange, ErrOutOfRange},
	{kmap.ErrCoords, ErrShape},
	{kmap.ErrMap, ErrShape},
	{kmap.ErrTooLarge, ErrIndexOverflow},
}

// mapError names the operation and adds the matching sentinel of this
// package, so that errors.Is works with both kmap's and sparse's
// sentinels. Geometry and extent errors keep their grid sentinels.
func mapError(op string, err error) error {
	if err == nil {
		return nil
	}
	for _, k := range mapErrorKinds {
		if errors.Is(err, k.kmap) {
			return &kindError{op: op, kind: k.sparse, err: err}
		}
	}
	return fmt.Errorf("sparse: %s: %w", op, err)
}

// kindError is an error from a subpackage that also matches a sentinel of
// this package.
type kindError struct {
	op        string
	kind, err error
}

// Error implements the error interface for kindError.
func (e *kindError) Error() string { return "sparse: " + e.op + ": " + e.err.Error() }

// Unwrap returns this package's sentinel and the original error.
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }
