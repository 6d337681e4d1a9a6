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
//
// # Tables held elsewhere
//
// An engine that builds maps on its device (package cudaext) keeps their
// tables there and sets Map.Source: the host slices it has no copy of are
// nil until Map.Load downloads them, once, on the first host use. Every
// method of Map and every CPU consumer loads on its own; code reading
// Nbr, InCoords or OutCoords directly calls Load first.
//
// # Kinds
//
//   - Submanifold: the outputs are the inputs; Nbr[o, v] is the row at
//     coords[o] + (k(v) − ⌊K/2⌋)·dilation. Kernel sizes must be odd.
//   - Strided (a sparse Conv3d): Nbr[o, v] is the row at
//     out[o]·stride − padding + k(v)·dilation. Unless given, the outputs are
//     every site of the torch output grid that some input reaches.
//   - Inverse: the way back from a strided map's outputs to exactly its
//     inputs (a UNet decoder): Nbr is the strided map's reverse table.
//   - Transposed (a sparse ConvTranspose3d): the outputs are every fine site
//     in·stride − padding + k·dilation inside the torch output grid.
//
// All geometry follows grid's one relation fine = coarse·S − P + k·D; the
// inverse direction divides only exact, non-negative numerators, so
// negative coordinates cannot be truncated the wrong way.
//
// # Building fast
//
// The builders sort the indexed coordinates by their exact key (a no-op
// for coordinates already in (batch, x, y, z) order, as every map's output
// coordinates are) and find neighbours by a merge join: queries visited in
// key order reach, per tap, ascending keys, so one forward cursor per tap
// replaces random hash probes with sequential reads. Work is split in
// fixed chunks of rows over GOMAXPROCS goroutines, each table entry is
// written once, and sorts are stable, so every result is identical for any
// number of workers.
package kmap
