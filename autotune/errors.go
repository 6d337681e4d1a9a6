package autotune

import "errors"

// Sentinel errors. Problems with the cache file are not returned by Open or
// Store as failures; they are passed to the warning function (see WithWarn)
// wrapped around one of ErrCorrupt, ErrForeign, ErrSchema, ErrEntry or
// ErrIO, and the cache carries on.
var (
	// ErrKey reports an invalid Key or Device.
	ErrKey = errors.New("autotune: invalid key")
	// ErrCandidate reports an empty or invalid candidate list.
	ErrCandidate = errors.New("autotune: invalid candidates")
	// ErrAllFailed reports that every candidate failed to run.
	ErrAllFailed = errors.New("autotune: every candidate failed")
	// ErrMode reports an unknown autotune mode.
	ErrMode = errors.New("autotune: unknown mode")
	// ErrHeuristic reports a heuristic that returned a non-candidate.
	ErrHeuristic = errors.New("autotune: heuristic chose a non-candidate")
	// ErrCorrupt reports a cache file that is not valid JSON or is truncated.
	ErrCorrupt = errors.New("autotune: corrupt cache file")
	// ErrForeign reports a valid JSON file that is not an autotune cache of
	// this package.
	ErrForeign = errors.New("autotune: not a flexgemm-go autotune file")
	// ErrSchema reports a cache file of a schema this version cannot read.
	ErrSchema = errors.New("autotune: unsupported cache schema")
	// ErrEntry reports one malformed entry, dropped from the cache.
	ErrEntry = errors.New("autotune: malformed cache entry")
	// ErrIO reports a failure to read, lock or write the cache file.
	ErrIO = errors.New("autotune: cache file I/O")
	// ErrReadOnly reports a store that was kept in memory only because the
	// file on disk was written by a newer version of this package.
	ErrReadOnly = errors.New("autotune: cache file is read-only for this version")
)
