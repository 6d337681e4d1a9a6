package hash

import (
	"errors"
	"fmt"
)

// Sentinel errors. Functions wrap them with %w and a message naming the
// offending value, so callers can test with errors.Is.
var (
	// ErrFull reports an insert into a fixed-capacity table that already
	// holds Cap keys.
	ErrFull = errors.New("hash: table full")
	// ErrDuplicate reports the insertion of a key that is already present;
	// the error is a *DuplicateError.
	ErrDuplicate = errors.New("hash: duplicate key")
	// ErrKey reports a key the table cannot store: 2^64 − 1, or any key
	// ≥ 2^32 − 1 in a narrow table.
	ErrKey = errors.New("hash: key out of range")
	// ErrCapacity reports a negative or impossibly large capacity.
	ErrCapacity = errors.New("hash: bad capacity")
	// ErrLength reports batch slices whose lengths disagree.
	ErrLength = errors.New("hash: length mismatch")
	// ErrCoords reports malformed coordinates given to FromCoords.
	ErrCoords = errors.New("hash: bad coordinates")
)

// DuplicateError reports an insert of a key that is already in the table.
// errors.Is(err, ErrDuplicate) holds for it.
type DuplicateError struct {
	// Key is the duplicated key.
	Key uint64
	// First is the value already stored under Key and Second the value
	// whose insertion failed. For FromCoords they are the earlier and the
	// later of the two equal rows.
	First, Second int32
	// Index is the position of the failed key in its batch (InsertBatch,
	// FromCoords), or −1 for a single Insert.
	Index int
}

// Error implements the error interface for DuplicateError.
func (e *DuplicateError) Error() string {
	if e.Index >= 0 {
		return fmt.Sprintf("hash: duplicate key %d at batch index %d: values %d and %d", e.Key, e.Index, e.First, e.Second)
	}
	return fmt.Sprintf("hash: duplicate key %d: values %d and %d", e.Key, e.First, e.Second)
}

// Unwrap makes errors.Is(err, ErrDuplicate) true for a *DuplicateError.
func (e *DuplicateError) Unwrap() error { return ErrDuplicate }
