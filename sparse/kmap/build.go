package kmap

import (
	"errors"
	"fmt"
	"math"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// Sentinel errors of the map builders. They are wrapped with %w and a
// message naming the offending value; geometry and extent problems are
// reported with grid.ErrBadGeometry and grid.ErrBadExtent.
var (
	// ErrCoords reports a coordinate array whose length is not a multiple
	// of 4.
	ErrCoords = errors.New("kmap: bad coordinates")
	// ErrOutOfRange reports a coordinate outside its extent.
	ErrOutOfRange = errors.New("kmap: coordinate out of range")
	// ErrDuplicate reports two rows with the same coordinate.
	ErrDuplicate = errors.New("kmap: duplicate coordinate")
	// ErrTooLarge reports row counts or tables beyond 32-bit row indices
	// or 2^40 table entries.
	ErrTooLarge = errors.New("kmap: map too large")
	// ErrMap reports an unusable map argument (nil, wrong kind, or
	// inconsistent fields).
	ErrMap = errors.New("kmap: bad map")
)

// maxTable bounds NOut·V, the size of a neighbour table.
const maxTable = 1 << 40

func newTable(nOut, V int) ([]int32, error) {
	if nOut >= math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d output rows overflow 32-bit row indices", ErrTooLarge, nOut)
	}
	if uint64(nOut)*uint64(V) > maxTable {
		return nil, fmt.Errorf("%w: a table of %d rows × %d taps", ErrTooLarge, nOut, V)
	}
	return make([]int32, nOut*V), nil
}

// NewSubmanifold builds the map of a submanifold convolution over coords
// (flat [N, 4], unique, inside ext): the outputs are the inputs, in the same
// row order, and
//
//	Nbr[o, v] = the row at coords[o] + (k(v) − ⌊K/2⌋)·dilation, or −1.
//
// Kernel sizes must be odd (an even size has no centre; this is checked,
// unlike in FlexGEMM). InCoords and OutCoords alias coords.
func NewSubmanifold(coords []int32, ext grid.Extent, kernel, dilation [3]int) (*Map, error) {
	conv := grid.Submanifold(kernel, dilation)
	if err := conv.ValidateSubmanifold(); err != nil {
		return nil, err
	}
	ix, err := newSortedIndex(coords, ext)
	if err != nil {
		return nil, err
	}
	n := len(coords) / 4
	nbr, err := newTable(n, conv.Volume())
	if err != nil {
		return nil, err
	}
	m := &Map{Kind: Submanifold, Conv: conv, In: ext, Out: ext, NIn: n, NOut: n, InCoords: coords, OutCoords: coords, Nbr: nbr}
	fill(m.Nbr, -1)
	gather(m.Nbr, coords, ext, ix.rows, ix, conv, fineFromCoarse, true)
	return m, nil
}

// NewStrided builds the map of a strided (generative) sparse convolution,
// torch.nn.Conv3d on the active sites, over coords (flat [N, 4], unique,
// inside ext). The output grid is conv.StridedExtent(ext) and
//
//	Nbr[o, v] = the row at out[o]·stride − padding + k(v)·dilation, or −1.
//
// With outCoords nil the outputs are every site of the output grid that
// some input reaches, sorted by (batch, x, y, z); otherwise they are
// outCoords (any order, unique, inside the output grid; aliased, not
// copied), and outputs that no input reaches get rows of −1. Any kernel
// size works, even ones included. InCoords aliases coords.
func NewStrided(coords []int32, ext grid.Extent, conv grid.Conv, outCoords []int32) (*Map, error) {
	out, ix, err := resampledGrid(coords, ext, conv, grid.Conv.StridedExtent)
	if err != nil {
		return nil, err
	}
	var qOrder []int32
	if outCoords == nil {
		outCoords = reachedSites(ix, coords, out, conv, coarseFromFine)
	} else {
		oix, err := newSortedIndex(outCoords, out)
		if err != nil {
			return nil, fmt.Errorf("output coordinates: %w", err)
		}
		qOrder = oix.rows
	}
	nOut := len(outCoords) / 4
	nbr, err := newTable(nOut, conv.Volume())
	if err != nil {
		return nil, err
	}
	m := &Map{Kind: Strided, Conv: conv, In: ext, Out: out, NIn: len(coords) / 4, NOut: nOut, InCoords: coords, OutCoords: outCoords, Nbr: nbr}
	gather(m.Nbr, outCoords, out, qOrder, ix, conv, fineFromCoarse, false)
	return m, nil
}

// resampledGrid validates conv, returns the output grid that extentOf
// gives it over ext (checked as every grid of a map is) and indexes the
// input coords: the common start of the strided and transposed maps.
func resampledGrid(coords []int32, ext grid.Extent, conv grid.Conv, extentOf func(grid.Conv, grid.Extent) (grid.Extent, error)) (grid.Extent, *sortedIndex, error) {
	if err := conv.Validate(); err != nil {
		return grid.Extent{}, nil, err
	}
	out, err := extentOf(conv, ext)
	if err != nil {
		return grid.Extent{}, nil, err
	}
	if err := checkExtent(out); err != nil {
		return grid.Extent{}, nil, fmt.Errorf("output grid: %w", err)
	}
	ix, err := newSortedIndex(coords, ext)
	if err != nil {
		return grid.Extent{}, nil, err
	}
	return out, ix, nil
}

// NewTransposed builds the map of a sparse transposed convolution,
// torch.nn.ConvTranspose3d on the active sites (no output padding), over
// coords (flat [N, 4], unique, inside ext). The output grid is
// conv.TransposedExtent(ext); the outputs are every site of it reached as
// in·stride − padding + k·dilation, sorted by (batch, x, y, z), and
//
//	Nbr[o, v] = the input row i with i·stride − padding + k(v)·dilation = out[o], or −1.
//
// InCoords aliases coords.
func NewTransposed(coords []int32, ext grid.Extent, conv grid.Conv) (*Map, error) {
	out, ix, err := resampledGrid(coords, ext, conv, grid.Conv.TransposedExtent)
	if err != nil {
		return nil, err
	}
	outCoords := reachedSites(ix, coords, out, conv, fineFromCoarse)
	nOut := len(outCoords) / 4
	nbr, err := newTable(nOut, conv.Volume())
	if err != nil {
		return nil, err
	}
	m := &Map{Kind: Transposed, Conv: conv, In: ext, Out: out, NIn: len(coords) / 4, NOut: nOut, InCoords: coords, OutCoords: outCoords, Nbr: nbr}
	gather(m.Nbr, outCoords, out, nil, ix, conv, coarseFromFine, false)
	return m, nil
}

// NewInverse builds the map that goes back from the outputs of the strided
// map s to exactly s's inputs, in s's input row order (the decoder half of
// a UNet): a transposed convolution with s's geometry whose outputs are
// s.InCoords, including inputs that no output of s reached (their rows are
// all −1). Its table is s's reverse table,
//
//	Nbr[i, v] = s.Reverse()[i, v],
//
// shared with s, and its own reverse table is s.Nbr. InCoords aliases
// s.OutCoords and OutCoords aliases s.InCoords.
func NewInverse(s *Map) (*Map, error) {
	if s == nil {
		return nil, fmt.Errorf("%w: NewInverse of a nil map", ErrMap)
	}
	if s.Kind != Strided {
		return nil, fmt.Errorf("%w: NewInverse needs a strided map, got a %v map", ErrMap, s.Kind)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("NewInverse: %w", err)
	}
	m := &Map{Kind: Inverse, Conv: s.Conv, In: s.Out, Out: s.In, NIn: s.NOut, NOut: s.NIn,
		InCoords: s.OutCoords, OutCoords: s.InCoords, Nbr: s.Reverse()}
	m.derived.rev, m.derived.haveRev = s.Nbr, true
	return m, nil
}
