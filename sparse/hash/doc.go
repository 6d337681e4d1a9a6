// Package hash is an exact open-addressing hash table from packed voxel
// keys to int32 values, the index behind every kernel map of this module.
//
// # Design
//
// Keys are the exact row-major site indices of a batched grid,
// grid.Extent.Key(b, x, y, z) = ((b·X + x)·Y + y)·Z + z. They are stored
// exactly: two different sites never share a key, and a lookup compares the
// whole key, so there are no false hits (unlike tables that store a lossy
// 64-bit digest of the coordinates).
//
//   - Capacity is a power of two and the load factor never exceeds 1/2.
//   - The slot of a key is the top bits of the Murmur3 64-bit finaliser of
//     the key; collisions are resolved by linear probing.
//   - Every probe loop is bounded: a growing table doubles before it would
//     pass the load limit, and a fixed-capacity table (Options.Fixed)
//     returns ErrFull instead. Nothing ever spins on a full table.
//   - A narrow table (Options.Narrow) packs a 32-bit key and its value into
//     one 64-bit slot, halving the memory traffic; it takes any key below
//     2^32 − 1, which covers every extent with Extent.KeyBits() == 32.
//     A wide table takes any key except 2^64 − 1, which no valid extent
//     produces.
//
// Inserting a key that is already present is reported with a
// *DuplicateError (errors.Is(err, ErrDuplicate)) naming both values, which
// for a table built by FromCoords are the two colliding rows.
//
// # Batches
//
// Random probes into a table much larger than the caches each cost a cache
// and a TLB miss. InsertBatch into an empty table and LookupBatch with
// many keys therefore first sort the keys by the top bits of their home
// slots (two 8-bit radix passes), so the probes sweep the table once; the
// results, errors included, are those of one-by-one calls.
//
// # Concurrency
//
// Lookups (Find, LookupBatch) may run concurrently with each other; inserts
// need exclusive access. LookupBatch splits large batches over goroutines
// with a fixed partition, so its result never depends on GOMAXPROCS.
package hash
