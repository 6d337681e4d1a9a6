package sparse

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/flexgemm-go/flexgemm/sparse/serialize"
)

// SerialMode selects the space-filling curve of EncodeCoords and SortBy:
// ZOrder or Hilbert (see package serialize for the code layout).
type SerialMode = serialize.Mode

// Serialisation modes, with FlexGEMM's names "z_order" and "hilbert"
// (serialize.ParseMode reads them).
const (
	ZOrder  = serialize.ZOrder
	Hilbert = serialize.Hilbert
)

// EncodeCoords returns the serialisation code of every row of coords
// (flat [N, 4], rows of batch, x, y, z) in ext. Codes are FlexGEMM's
// encode_seq codes as uint64: the batch index above 3·bits interleaved
// spatial bits, with bits = bit length of max(X, Y, Z) − 1. It fails for
// malformed coords (ErrShape), a row outside ext (ErrOutOfRange) and an
// extent whose codes need more than 64 bits (serialize.ErrTooLarge).
func EncodeCoords(coords []int32, ext Extent, mode SerialMode) ([]uint64, error) {
	if len(coords)%4 != 0 {
		return nil, fmt.Errorf("%w: coordinate array of length %d is not [N, 4]", ErrShape, len(coords))
	}
	codes := make([]uint64, len(coords)/4)
	if err := serialize.Encode(mode, coords, ext, codes); err != nil {
		return nil, serialError(err)
	}
	return codes, nil
}

// DecodeCoords is the inverse of EncodeCoords: it returns the [N, 4]
// coordinates of codes in ext. A code that is not the code of a site of
// ext fails with ErrOutOfRange.
func DecodeCoords(codes []uint64, ext Extent, mode SerialMode) ([]int32, error) {
	coords := make([]int32, 4*len(codes))
	if err := serialize.Decode(mode, codes, ext, coords); err != nil {
		return nil, serialError(err)
	}
	return coords, nil
}

// serialError adds this package's sentinels to the serialize ones, so
// errors.Is(err, ErrShape) and errors.Is(err, ErrOutOfRange) hold for the
// corresponding serialize errors too.
func serialError(err error) error {
	switch {
	case errors.Is(err, serialize.ErrShape):
		return fmt.Errorf("%w: %w", ErrShape, err)
	case errors.Is(err, serialize.ErrOutOfRange):
		return fmt.Errorf("%w: %w", ErrOutOfRange, err)
	}
	return fmt.Errorf("sparse: %w", err)
}

// SortBy returns t with its rows reordered along the curve of mode, and the
// permutation: sorted row j is t's row perm[j]. The sort is stable (rows
// with equal codes, which only duplicates have, keep their order) and
// groups rows by batch first. Host features ([]float32, []float64,
// []int32) are permuted with the coordinates; the result shares no memory
// with t. A zero-feature Matrix stays zero. Device features fail with
// ErrDType: sort the coordinates (a Tensor with zero Feats) and apply perm
// on the device.
func SortBy(t *Tensor, mode SerialMode) (sorted *Tensor, perm []int32, err error) {
	if t == nil {
		return nil, nil, fmt.Errorf("%w: SortBy of a nil tensor", ErrShape)
	}
	if err := checkPermutable("SortBy", t); err != nil {
		return nil, nil, err
	}
	codes, err := EncodeCoords(t.Coords, t.Extent, mode)
	if err != nil {
		return nil, nil, err
	}
	perm, sortedCodes, err := serialize.SortCodes(codes)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrIndexOverflow, err)
	}
	// Decoding the sorted codes streams through memory; gathering the
	// coordinate rows by perm would jump around it.
	coords := make([]int32, len(t.Coords))
	if err := serialize.Decode(mode, sortedCodes, t.Extent, coords); err != nil {
		return nil, nil, serialError(err)
	}
	sorted = &Tensor{Coords: coords, Extent: t.Extent}
	if !t.Feats.IsZero() {
		if sorted.Feats, err = gatherMatrix(t.Feats, perm); err != nil {
			return nil, nil, err
		}
	}
	return sorted, perm, nil
}

// Permute returns the tensor whose row j is t's row perm[j], coordinates and
// host features alike (see SortBy). perm must be a permutation of
// [0, N): a wrong length fails with ErrShape, an index outside [0, N) with
// ErrOutOfRange and a repeated index with ErrDuplicate.
func Permute(t *Tensor, perm []int32) (*Tensor, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: Permute of a nil tensor", ErrShape)
	}
	if err := checkPermutable("Permute", t); err != nil {
		return nil, err
	}
	if err := checkPermutation(perm, t.N()); err != nil {
		return nil, err
	}
	return permuteUnchecked(t, perm)
}

// PermuteRows returns the host matrix whose row j is m's row perm[j]. perm
// must be a permutation of [0, m.Rows) (errors as in Permute); m must hold
// []float32, []float64 or []int32.
func PermuteRows(m Matrix, perm []int32) (Matrix, error) {
	if err := m.Validate(); err != nil {
		return Matrix{}, err
	}
	if err := checkPermutation(perm, m.Rows); err != nil {
		return Matrix{}, err
	}
	return gatherMatrix(m, perm)
}

// InversePermutation returns inv with inv[perm[j]] = j, so that permuting
// by perm and then by inv restores the original order. perm must be a
// permutation of [0, len(perm)).
func InversePermutation(perm []int32) ([]int32, error) {
	if err := checkPermutation(perm, len(perm)); err != nil {
		return nil, err
	}
	inv := make([]int32, len(perm))
	for j, p := range perm {
		inv[p] = int32(j)
	}
	return inv, nil
}

func checkPermutable(op string, t *Tensor) error {
	if len(t.Coords)%4 != 0 {
		return fmt.Errorf("%w: %s: coordinate array of length %d is not [N, 4]", ErrShape, op, len(t.Coords))
	}
	if t.N() > math.MaxInt32 {
		return fmt.Errorf("%w: %s: %d rows exceed 32-bit row indices", ErrIndexOverflow, op, t.N())
	}
	if t.Feats.IsZero() {
		return nil
	}
	if err := t.Feats.Validate(); err != nil {
		return fmt.Errorf("sparse: %s: features: %w", op, err)
	}
	if t.Feats.Rows != t.N() {
		return &ShapeError{Op: op, Arg: "feats", Want: fmt.Sprintf("[%d, C]", t.N()), Got: t.Feats.Shape()}
	}
	switch t.Feats.Data.(type) {
	case []float32, []float64, []int32:
		return nil
	}
	return fmt.Errorf("%w: %s permutes host features only, got %T", ErrDType, op, t.Feats.Data)
}

// checkPermutation reports whether perm is a permutation of [0, n).
func checkPermutation(perm []int32, n int) error {
	if len(perm) != n {
		return fmt.Errorf("%w: permutation of length %d for %d rows", ErrShape, len(perm), n)
	}
	seen := make([]uint64, (n+63)/64)
	for j, p := range perm {
		if p < 0 || int(p) >= n {
			return fmt.Errorf("%w: permutation entry %d is %d, outside [0, %d)", ErrOutOfRange, j, p, n)
		}
		if seen[p/64]&(1<<(p%64)) != 0 {
			return fmt.Errorf("%w: permutation entry %d repeats row %d", ErrDuplicate, j, p)
		}
		seen[p/64] |= 1 << (p % 64)
	}
	return nil
}

func permuteUnchecked(t *Tensor, perm []int32) (*Tensor, error) {
	coords := make([]int32, len(t.Coords))
	gatherRows(t.Coords, coords, 4, perm)
	out := &Tensor{Coords: coords, Extent: t.Extent}
	if !t.Feats.IsZero() {
		f, err := gatherMatrix(t.Feats, perm)
		if err != nil {
			return nil, err
		}
		out.Feats = f
	}
	return out, nil
}

func gatherMatrix(m Matrix, perm []int32) (Matrix, error) {
	out := Matrix{Rows: m.Rows, Cols: m.Cols}
	switch d := m.Data.(type) {
	case []float32:
		o := make([]float32, len(d))
		gatherRows(d, o, m.Cols, perm)
		out.Data = o
	case []float64:
		o := make([]float64, len(d))
		gatherRows(d, o, m.Cols, perm)
		out.Data = o
	case []int32:
		o := make([]int32, len(d))
		gatherRows(d, o, m.Cols, perm)
		out.Data = o
	default:
		return Matrix{}, fmt.Errorf("%w: cannot permute the rows of %T on the host", ErrDType, m.Data)
	}
	return out, nil
}

// gatherRows sets dst row j to src row perm[j], rows of width cols.
func gatherRows[T any](src, dst []T, cols int, perm []int32) {
	if cols == 0 {
		return
	}
	grain := max(1, (1<<15)/cols)
	fixedRanges(len(perm), grain, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			p := int(perm[j])
			copy(dst[j*cols:(j+1)*cols], src[p*cols:(p+1)*cols])
		}
	})
}

// fixedRanges calls f on [0, n) split into ranges of grain rows, in parallel
// when there is more than one range. The split depends on n and grain
// only, never on GOMAXPROCS, and every range runs exactly once.
func fixedRanges(n, grain int, f func(lo, hi int)) {
	ranges := (n + grain - 1) / grain
	workers := min(runtime.GOMAXPROCS(0), ranges)
	if workers <= 1 {
		for lo := 0; lo < n; lo += grain {
			f(lo, min(lo+grain, n))
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				r := int(next.Add(1) - 1)
				if r >= ranges {
					return
				}
				f(r*grain, min((r+1)*grain, n))
			}
		})
	}
	wg.Wait()
}
