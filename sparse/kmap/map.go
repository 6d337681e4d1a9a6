// Package kmap builds kernel maps (neighbour tables) for sparse 3D
// convolution and the derived index structures each GEMM algorithm needs.
//
// # Overview
//
// A Map relates NOut output rows to NIn input rows through the V taps of a
// convolution window. Every kind of convolution (submanifold, strided,
// inverse, transposed) is expressed by the same table
//
//	Nbr[o·V + v] = i   if input row i feeds output row o through tap v
//	Nbr[o·V + v] = −1  if no input does
//
// so one forward loop serves all of them:
//
//	for o, v:  if i := Nbr[o·V+v]; i >= 0 { Y[o,:] += W[:,v,:] · X[i,:] }
//
// Each (i, v) feeds at most one o, so the reverse table Rev[i·V+v] = o is
// well defined and gives the input gradient without atomics:
//
//	dX[i,:] = Σ_v W[:,v,:]ᵀ · dY[Rev[i·V+v], :]
//
// The weight gradient walks the per-tap pair lists (Pairs).
//
// Maps are immutable once built and safe for concurrent use; derived
// structures (reverse table, pair lists, masks and Gray-code order) are
// computed on first use and cached, so a map shared by several layers pays
// for them once.
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
// NewInverse or NewTransposed.
type Map struct {
	Kind Kind
	Conv grid.Conv
	// In and Out are the extents of the input and output grids.
	In, Out grid.Extent
	// NIn and NOut are the numbers of input and output rows.
	NIn, NOut int
	// OutCoords holds the output coordinates, [NOut, 4] flat. For a
	// submanifold map it aliases the input coordinates.
	OutCoords []int32
	// Nbr is the [NOut, V] neighbour table; −1 marks an absent neighbour.
	Nbr []int32

	derived derivedCache
}

// V returns the kernel volume (number of taps).
func (m *Map) V() int { return m.Conv.Volume() }
