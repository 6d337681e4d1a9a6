package sparse

import (
	"errors"
	"fmt"
)

// Sentinel errors. Functions wrap them with %w and a message that names the
// offending value, so callers can test with errors.Is.
var (
	// ErrShape reports arrays whose lengths or dimensions disagree.
	ErrShape = errors.New("sparse: shape mismatch")
	// ErrDType reports an unsupported or mismatched element type.
	ErrDType = errors.New("sparse: unsupported dtype")
	// ErrOutOfRange reports a coordinate outside the tensor's extent.
	ErrOutOfRange = errors.New("sparse: coordinate out of range")
	// ErrDuplicate reports two rows with the same coordinate.
	ErrDuplicate = errors.New("sparse: duplicate coordinate")
	// ErrIndexOverflow reports a problem too large for 32-bit row indices.
	ErrIndexOverflow = errors.New("sparse: index overflow")
	// ErrNoEngine reports data that no registered engine can handle.
	ErrNoEngine = errors.New("sparse: no engine for data")
	// ErrAlgorithm reports an unknown convolution algorithm.
	ErrAlgorithm = errors.New("sparse: unknown algorithm")
	// ErrOptions reports invalid convolution options, such as a negative
	// split count or tile size.
	ErrOptions = errors.New("sparse: bad options")
)

// ShapeError describes a shape mismatch in one argument of an operation.
type ShapeError struct {
	Op   string // operation, e.g. "Conv"
	Arg  string // argument name, e.g. "weight"
	Want string // expected shape, e.g. "[64, 27, 32]"
	Got  string // actual shape
}

// Error implements the error interface for ShapeError.
func (e *ShapeError) Error() string {
	return fmt.Sprintf("sparse: %s: %s has shape %s, want %s", e.Op, e.Arg, e.Got, e.Want)
}

// Unwrap makes errors.Is(err, ErrShape) true for a *ShapeError.
func (e *ShapeError) Unwrap() error { return ErrShape }
