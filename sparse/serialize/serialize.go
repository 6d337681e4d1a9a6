package serialize

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// Sentinel errors. Functions wrap them with %w and a message naming the
// offending value, so callers can test with errors.Is.
var (
	// ErrMode reports an unknown serialisation mode.
	ErrMode = errors.New("serialize: unknown mode")
	// ErrExtent reports an extent with a non-positive dimension.
	ErrExtent = errors.New("serialize: bad extent")
	// ErrTooLarge reports an extent whose codes need more than 64 bits.
	ErrTooLarge = errors.New("serialize: codes need more than 64 bits")
	// ErrShape reports arrays whose lengths disagree.
	ErrShape = errors.New("serialize: shape mismatch")
	// ErrOutOfRange reports a coordinate outside the extent, or a code that
	// is not the code of any site of the extent.
	ErrOutOfRange = errors.New("serialize: value out of range")
)

// MaxAxisBits is the largest number of bits per spatial axis: 3·21 = 63
// bits fit in a uint64 code.
const MaxAxisBits = 21

// Mode selects the space-filling curve. The zero Mode is ZOrder.
type Mode uint8

// Serialisation modes. The names are FlexGEMM's.
const (
	// ZOrder is the Morton (z-order) curve: interleaved bits of x, y, z.
	ZOrder Mode = iota
	// Hilbert is the 3D Hilbert curve of Skilling's transpose method.
	Hilbert
)

var modeNames = [...]string{ZOrder: "z_order", Hilbert: "hilbert"}

// String returns "z_order" or "hilbert" (FlexGEMM's names), or "Mode(n)"
// for an invalid mode.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Valid returns nil for ZOrder and Hilbert and a wrapped ErrMode otherwise.
func (m Mode) Valid() error {
	if int(m) < len(modeNames) {
		return nil
	}
	return fmt.Errorf("%w: %v (want z_order or hilbert)", ErrMode, m)
}

// ParseMode returns the mode named s: "z_order" or "hilbert" (case and
// surrounding space are ignored).
func ParseMode(s string) (Mode, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for m, name := range modeNames {
		if t == name {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("%w: %q (want z_order or hilbert)", ErrMode, s)
}

// MarshalText implements encoding.TextMarshaler with the String names.
func (m Mode) MarshalText() ([]byte, error) {
	if err := m.Valid(); err != nil {
		return nil, err
	}
	return []byte(m.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler with ParseMode.
func (m *Mode) UnmarshalText(text []byte) error {
	v, err := ParseMode(string(text))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Bits returns the number of code bits per spatial axis, the bit length of
// max(X, Y, Z) − 1, and the number of batch bits, the bit length of
// Batch − 1. A code of ext uses 3·axisBits + batchBits bits. Bits fails
// with ErrExtent for a non-positive dimension and with ErrTooLarge when the
// codes would need more than 64 bits.
func Bits(ext grid.Extent) (axisBits, batchBits int, err error) {
	if ext.Batch <= 0 || ext.X <= 0 || ext.Y <= 0 || ext.Z <= 0 {
		return 0, 0, fmt.Errorf("%w: %v has a non-positive dimension", ErrExtent, ext)
	}
	axisBits = bits.Len64(uint64(max(ext.X, ext.Y, ext.Z) - 1))
	batchBits = bits.Len64(uint64(ext.Batch - 1))
	if 3*axisBits+batchBits > 64 {
		return 0, 0, fmt.Errorf("%w: %v needs 3·%d spatial + %d batch bits = %d", ErrTooLarge, ext, axisBits, batchBits, 3*axisBits+batchBits)
	}
	return axisBits, batchBits, nil
}

// CodeBits returns 3·axisBits + batchBits, the number of significant bits
// of the codes of ext (see Bits). Codes fit in a uint32 when it is ≤ 32.
func CodeBits(ext grid.Extent) (int, error) {
	a, b, err := Bits(ext)
	if err != nil {
		return 0, err
	}
	return 3*a + b, nil
}

// EncodePoint returns the code of site (b, x, y, z) for axisBits bits per
// spatial axis. It does no checking: axisBits must be in [0, MaxAxisBits],
// x, y, z below 2^axisBits, and b below 2^(64 − 3·axisBits); use Encode
// for checked bulk encoding.
func EncodePoint(mode Mode, axisBits int, b, x, y, z uint32) uint64 {
	if mode == Hilbert {
		return hilbertEncode(axisBits, x, y, z) | uint64(b)<<(3*axisBits)
	}
	return interleave3(x, y, z) | uint64(b)<<(3*axisBits)
}

// DecodePoint is the inverse of EncodePoint. It does no checking: the
// decoded batch index is code >> (3·axisBits) truncated to 32 bits.
func DecodePoint(mode Mode, axisBits int, code uint64) (b, x, y, z uint32) {
	shift := 3 * axisBits
	b = uint32(code >> shift)
	s := code & (1<<shift - 1)
	if mode == Hilbert {
		x, y, z = hilbertDecode(axisBits, s)
		return b, x, y, z
	}
	x, y, z = deinterleave3(s)
	return b, x, y, z
}

// codec is a checked encoder/decoder for one extent.
type codec struct {
	mode     Mode
	axisBits int
	ext      grid.Extent
}

func newCodec(mode Mode, ext grid.Extent) (codec, error) {
	if err := mode.Valid(); err != nil {
		return codec{}, err
	}
	a, _, err := Bits(ext)
	if err != nil {
		return codec{}, err
	}
	return codec{mode: mode, axisBits: a, ext: ext}, nil
}

// encodeRange encodes rows [lo, hi) of coords into out and returns the
// first row outside the extent, or −1.
func (c codec) encodeRange(coords []int32, out []uint64, lo, hi int) int {
	B, X, Y, Z := uint32(c.ext.Batch), uint32(c.ext.X), uint32(c.ext.Y), uint32(c.ext.Z)
	// Negative values become huge uint32s and fail the same comparison.
	for r := lo; r < hi; r++ {
		p := coords[4*r : 4*r+4 : 4*r+4]
		b, x, y, z := uint32(p[0]), uint32(p[1]), uint32(p[2]), uint32(p[3])
		if b >= B || x >= X || y >= Y || z >= Z {
			return r
		}
		out[r] = EncodePoint(c.mode, c.axisBits, b, x, y, z)
	}
	return -1
}

// decodeRange decodes codes [lo, hi) into out and returns the first code
// that is not the code of a site of the extent, or −1.
func (c codec) decodeRange(codes []uint64, out []int32, lo, hi int) int {
	shift := 3 * c.axisBits
	B, X, Y, Z := uint64(c.ext.Batch), uint32(c.ext.X), uint32(c.ext.Y), uint32(c.ext.Z)
	for i := lo; i < hi; i++ {
		code := codes[i]
		if code>>shift >= B {
			return i
		}
		b, x, y, z := DecodePoint(c.mode, c.axisBits, code)
		if x >= X || y >= Y || z >= Z {
			return i
		}
		p := out[4*i : 4*i+4 : 4*i+4]
		p[0], p[1], p[2], p[3] = int32(b), int32(x), int32(y), int32(z)
	}
	return -1
}

// Encode writes the code of every row of coords (flat [N, 4], rows of
// batch, x, y, z) into out, which must have length N. It fails with
// ErrShape for mismatched lengths, with ErrOutOfRange naming the first row
// outside ext (out is then partly written), and as Bits does for ext.
func Encode(mode Mode, coords []int32, ext grid.Extent, out []uint64) error {
	c, err := newCodec(mode, ext)
	if err != nil {
		return err
	}
	if len(coords)%4 != 0 {
		return fmt.Errorf("%w: coordinate array of length %d is not [N, 4]", ErrShape, len(coords))
	}
	n := len(coords) / 4
	if len(out) != n {
		return fmt.Errorf("%w: %d coordinates but %d output codes", ErrShape, n, len(out))
	}
	bad := parallelFirst(n, func(lo, hi int) int { return c.encodeRange(coords, out, lo, hi) })
	if bad >= 0 {
		p := coords[4*bad : 4*bad+4]
		return fmt.Errorf("%w: row %d (%d, %d, %d, %d) is outside %v", ErrOutOfRange, bad, p[0], p[1], p[2], p[3], ext)
	}
	return nil
}

// Decode writes the site of every code into out (flat [N, 4], rows of
// batch, x, y, z), which must have length 4·len(codes). It fails with
// ErrShape for mismatched lengths, with ErrOutOfRange naming the first code
// that is not the code of a site of ext (out is then partly written), and
// as Bits does for ext.
func Decode(mode Mode, codes []uint64, ext grid.Extent, out []int32) error {
	c, err := newCodec(mode, ext)
	if err != nil {
		return err
	}
	if len(out) != 4*len(codes) {
		return fmt.Errorf("%w: %d codes need an output of length %d, got %d", ErrShape, len(codes), 4*len(codes), len(out))
	}
	bad := parallelFirst(len(codes), func(lo, hi int) int { return c.decodeRange(codes, out, lo, hi) })
	if bad >= 0 {
		return fmt.Errorf("%w: code %d (%#x) at index %d is not a site of %v in %v order", ErrOutOfRange, codes[bad], codes[bad], bad, ext, mode)
	}
	return nil
}
