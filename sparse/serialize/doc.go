// Package serialize maps the sites of a batched voxel grid to 64-bit codes
// along a space-filling curve, and back.
//
// # Codes
//
// For an extent of Batch grids of X×Y×Z voxels, every spatial axis gets
//
//	axisBits  = bit length of max(X, Y, Z) − 1
//	batchBits = bit length of Batch − 1
//
// (so an axis of size 1 needs no bits), and a site (b, x, y, z) becomes
//
//	code = b << (3·axisBits) | interleave(x', y', z')
//
// where interleave places bit i of x', y', z' at bits 3i+2, 3i+1, 3i of the
// code (x in the most significant slot of each triple). In ZOrder mode
// (x', y', z') = (x, y, z), the Morton order. In Hilbert mode (x', y', z') is
// the "transposed" Hilbert index of (x, y, z) from J. Skilling, "Programming
// the Hilbert curve", AIP Conf. Proc. 707 (2004), so consecutive codes of a
// full 2^k cube are face neighbours.
//
// The layout, the bit widths and both curves are those of FlexGEMM's
// encode_seq/decode_seq, so codes agree with FlexGEMM's bit for bit (read
// as unsigned integers). Unlike FlexGEMM's z-order kernel, the batch index
// is shifted as a 64-bit value: no batch bit is lost for any extent whose
// codes fit in 64 bits (3·axisBits + batchBits ≤ 64). Larger extents are
// rejected with ErrTooLarge.
//
// # Ordering
//
// Sorting sites by code groups them by batch first (the batch index is the
// most significant field), then along the curve. Every aligned block of
// 8^l consecutive codes covers one aligned 2^l cube in both modes.
//
// # Bulk operations and determinism
//
// Encode and Decode work on flat [N, 4] int32 coordinate arrays (rows of
// batch, x, y, z) and run in parallel over fixed-size chunks. Each output
// element depends on one input element only, and when several inputs are
// invalid the error names the first one, so results and errors are the same
// for any GOMAXPROCS. Argsort and SortCodes order codes with a stable LSD
// radix sort.
package serialize
