// Package autotune picks, remembers and ships the fastest kernel
// configuration for each convolution problem.
//
// # Overview
//
// A GPU engine has several ways to run one problem: an algorithm (explicit,
// implicit, masked implicit GEMM, with or without split-K), a tile
// configuration and a split-K factor. Which is fastest depends on the
// device, the dtype, the channel counts, the kernel volume and, roughly, on
// the number of rows. This package
//
//   - names a problem by a comparable Key (device, op, direction, dtype and
//     TF32 flag, kernel volume V, Ci, Co and the ⌊log2 N⌋ bucket of the row
//     count, with N = 0 in its own bucket −1);
//   - times a list of Candidates within a budget and keeps the best (Tuner);
//   - remembers the choice in a persistent JSON file shared by every process
//     of the user (Cache), merged over a pre-tuned table embedded in the
//     module (pretuned/*.json), so that an untuned run on a known device is
//     still good.
//
// # The cache file
//
// The file lives at os.UserCacheDir()/flexgemm-go/autotune.json unless the
// environment variable FLEXGEMM_AUTOTUNE_CACHE or the WithPath option says
// otherwise. It carries a format marker and a schema number and holds one
// section per device. Every store takes an exclusive file lock
// (<path>.lock), re-reads the file, merges this process's new entries into
// it and replaces it atomically (temporary file in the same directory,
// fsync, rename), so concurrent processes never lose each other's entries
// and a reader never sees a half-written file. For one key the most recent
// measurement wins.
//
// A file that is not JSON, truncated, of another program (for example
// FlexGEMM's own autotune_cache.json) or of an unknown old schema is
// reported through the warning function, moved aside to <path>.bad-<time>,
// and rebuilt; a file of an older known schema is migrated. A file written
// by a newer version of this package is left untouched and the cache works
// in memory only.
//
// These rules fix the weak points of FlexGEMM's autotuner: its split-K
// keys ignore dtype and TF32, its save replaces the whole device section
// (the last writer wins), and its ⌊log2 N⌋ bucket fails for N = 0.
//
// # Modes
//
// The environment variable FLEXGEMM_AUTOTUNE (or the WithMode option)
// selects how a Tuner decides:
//
//	on          cached choice if any, else measure, store and return the best (default)
//	cache-only  cached choice if any, else the heuristic; never measures
//	off         always the heuristic; never reads the cache, never measures
//
// cache-only and off are deterministic: they never time anything, so two
// runs of one program pick the same kernels.
package autotune
