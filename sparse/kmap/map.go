package kmap

import (
	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// Kind says which convolution a map was built for.
type Kind int

// The kinds of kernel map.
const (
	// Submanifold: output coordinates equal the input coordinates, odd
	// kernel, tap ⌊V/2⌋ at the centre.
	Submanifold Kind = iota
	// Strided: a sparse Conv3d; input (fine) site = output·S − P + k·D.
	Strided
	// Inverse: goes back from a strided convolution's output to exactly its
	// input coordinates; output (fine) site = input·S − P + k·D.
	Inverse
	// Transposed: a sparse ConvTranspose3d; outputs are every fine site
	// reached by an input, output = input·S − P + k·D.
	Transposed
)

// String implements fmt.Stringer for Kind.
func (k Kind) String() string {
	switch k {
	case Submanifold:
		return "submanifold"
	case Strided:
		return "strided"
	case Inverse:
		return "inverse"
	case Transposed:
		return "transposed"
	}
	return "unknown"
}

// Map is a kernel map. Build one with NewSubmanifold, NewStrided,
// NewInverse or NewTransposed. A Map must not be modified after it is
// built; its exported slices may alias the caller's coordinate arrays (as
// documented per builder) and each other (a submanifold map's InCoords and
// OutCoords are one array; an inverse map's Nbr is its strided map's
// reverse table).
//
// A map built by an engine on its device may keep its tables there: its
// Source is set and the host slices it has no copy of yet are nil until
// Load fills them. Read InCoords, OutCoords or Nbr directly only after
// Load returned nil (or Loaded reports true); the methods of Map load on
// their own.
type Map struct {
	// Kind is the convolution the map was built for.
	Kind Kind
	// Conv is its geometry (for a submanifold map: stride 1, padding
	// ⌊K/2⌋·dilation).
	Conv grid.Conv
	// In and Out are the extents of the input and output grids.
	In, Out grid.Extent
	// NIn and NOut are the numbers of input and output rows.
	NIn, NOut int
	// InCoords holds the input coordinates, [NIn, 4] flat, in input row
	// order.
	InCoords []int32
	// OutCoords holds the output coordinates, [NOut, 4] flat, in output
	// row order.
	OutCoords []int32
	// Nbr is the [NOut, V] neighbour table: Nbr[o·V+v] is the input row
	// that reaches output row o through tap v, or −1.
	Nbr []int32
	// Source, when not nil, holds the tables of a map built elsewhere (an
	// engine's device) and copies them to the host on first host use (see
	// Load). The builders of this package leave it nil.
	Source TableSource

	derived derivedCache
}

// V returns the kernel volume (number of taps).
func (m *Map) V() int { return m.Conv.Volume() }
