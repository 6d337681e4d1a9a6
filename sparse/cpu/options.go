package cpu

import (
	"errors"
	"fmt"
)

// Sentinel errors of this package. Functions wrap them with %w and a
// message naming the offending value.
var (
	// ErrShape reports slices whose lengths disagree with the kernel map or
	// the channel counts.
	ErrShape = errors.New("cpu: shape mismatch")
	// ErrOptions reports an unknown method or a negative split count or
	// tile size.
	ErrOptions = errors.New("cpu: bad options")
	// ErrMap reports a kernel map whose tables are inconsistent.
	ErrMap = errors.New("cpu: bad kernel map")
)

// Method selects how a convolution is computed. Every method computes the
// same sums; they differ in the order of the additions (so results agree
// to rounding, not bit for bit), in wasted work and in memory.
type Method int

// The methods, named after FlexGEMM's algorithms.
const (
	// Auto picks a method from the problem shape (see Options.Resolve).
	Auto Method = iota
	// Explicit gathers blocks of the im2col matrix [rows, V·K] (zeros for
	// absent neighbours) and multiplies each block by the packed weight
	// [V·K, N] in one GEMM.
	Explicit
	// Implicit walks tiles of output rows in their natural order; for every
	// one of the V taps it gathers the tile's neighbour rows (zeros for
	// absent ones) and accumulates a [rows, K]·[K, N] GEMM into the tile.
	Implicit
	// ImplicitSplitK is Implicit with the V·K reduction of every tile split
	// into SplitK contiguous chunks that are computed separately and summed
	// in chunk order.
	ImplicitSplitK
	// Masked walks tiles of rows taken in the Gray-code order of their
	// neighbour bitmasks (kmap.Masked) and visits only the taps in the
	// tile's union; for each tap it gathers only the rows that have that
	// neighbour.
	Masked
	// MaskedSplitK is Masked with the reduction over the tile's union taps
	// split into SplitK chunks summed in chunk order.
	MaskedSplitK
)

var methodNames = [...]string{
	Auto:           "auto",
	Explicit:       "explicit",
	Implicit:       "implicit",
	ImplicitSplitK: "implicit-splitk",
	Masked:         "masked",
	MaskedSplitK:   "masked-splitk",
}

// Methods lists every concrete method (all but Auto).
var Methods = []Method{Explicit, Implicit, ImplicitSplitK, Masked, MaskedSplitK}

// String returns the method's name, e.g. "masked".
func (m Method) String() string {
	if m >= 0 && int(m) < len(methodNames) {
		return methodNames[m]
	}
	return fmt.Sprintf("Method(%d)", int(m))
}

// SplitK reports whether m splits its reduction.
func (m Method) SplitK() bool { return m == ImplicitSplitK || m == MaskedSplitK }

// Defaults used when Options leave a field zero. They are constants, never
// derived from GOMAXPROCS, so results do not depend on the machine.
const (
	// DefaultTileRows is the tile height of Implicit and Masked and the
	// block height of Explicit. Larger tiles reuse each tap's packed
	// weight panel over more rows; 256 rows of 64 float32 accumulators
	// (64 KiB) still sit in L2. Sweeps on the RES=64 shell (C=64) gave
	// 128–512 within noise of each other.
	DefaultTileRows = 256
	// DefaultSplitK is the number of reduction chunks of the split-K
	// methods and of the split-K weight gradient.
	DefaultSplitK = 4
	// MaxSplitK bounds SplitK (partial sums are stored for every chunk).
	MaxSplitK = 64
	// MaxTileRows bounds TileRows.
	MaxTileRows = 1 << 16
	// autoExplicitMaxK is the largest per-tap reduction for which Auto
	// chooses Explicit.
	autoExplicitMaxK = 16
)

// Options tunes a convolution. The zero value is Auto with default tile
// size and split count.
type Options struct {
	// Method selects the formulation.
	Method Method
	// SplitK is the number of reduction chunks of the split-K methods
	// (0: DefaultSplitK). The other methods ignore it.
	SplitK int
	// TileRows is the number of rows per tile of the implicit and masked
	// methods, and per block of Explicit (0: DefaultTileRows).
	TileRows int
}

// Validate reports an unknown method or a negative or too large split
// count or tile size.
func (o Options) Validate() error {
	if o.Method < 0 || int(o.Method) >= len(methodNames) {
		return fmt.Errorf("%w: unknown method %d", ErrOptions, int(o.Method))
	}
	if o.SplitK < 0 || o.SplitK > MaxSplitK {
		return fmt.Errorf("%w: split count %d outside [0, %d]", ErrOptions, o.SplitK, MaxSplitK)
	}
	if o.TileRows < 0 || o.TileRows > MaxTileRows {
		return fmt.Errorf("%w: tile rows %d outside [0, %d]", ErrOptions, o.TileRows, MaxTileRows)
	}
	return nil
}

// Resolve returns o with Auto replaced by a concrete method and zero
// fields replaced by their defaults. k is the reduction length per tap
// (input channels for the forward pass, output channels for the input
// gradient) and n the output width.
//
// Auto picks Masked, which does no work on absent neighbours, except for
// k ≤ 16: then the per-tap GEMMs are too short to run efficiently and
// Explicit, one GEMM of depth V·k per block, is as fast or faster
// (BenchmarkChannels).
func (o Options) Resolve(k, n int) Options {
	if o.Method == Auto {
		o.Method = Masked
		if k <= autoExplicitMaxK {
			o.Method = Explicit
		}
	}
	if o.TileRows == 0 {
		o.TileRows = DefaultTileRows
	}
	if o.SplitK == 0 {
		o.SplitK = DefaultSplitK
	}
	return o
}
