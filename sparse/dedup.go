package sparse

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/hash"
)

// FindDuplicate reports whether two rows of the flat [N, 4] coordinate
// array are equal, and if so returns the earliest row r that equals an
// earlier row, and q, the first row with that coordinate. Coordinates must
// lie inside ext; rows from the first one outside it on are not examined.
// It builds an exact hash table of the rows (package hash), so it takes
// O(N) time.
func FindDuplicate(coords []int32, ext Extent) (r, q int, found bool) {
	_, err := hash.FromCoords(coords, ext)
	if d, ok := hash.AsDuplicate(err); ok {
		return d.Index, int(d.First), true
	}
	return 0, 0, false
}

// Reduce says how MergeDuplicates combines the features of equal rows.
type Reduce int

// Reductions for MergeDuplicates.
const (
	Sum Reduce = iota
	Mean
)

// MergeDuplicates returns coordinates without duplicates (first occurrence
// order) with the features of equal rows summed or averaged, and for every
// input row the output row it went to. feats may be the zero Matrix to
// merge coordinates only.
func MergeDuplicates(coords []int32, feats Matrix, ext Extent, how Reduce) (outCoords []int32, outFeats Matrix, inverse []int32, err error) {
	if len(coords)%4 != 0 {
		return nil, Matrix{}, nil, fmt.Errorf("%w: coordinate array of length %d is not [N, 4]", ErrShape, len(coords))
	}
	if err := checkRange(coords, ext); err != nil {
		return nil, Matrix{}, nil, err
	}
	n := len(coords) / 4
	if !feats.IsZero() {
		if err := feats.Validate(); err != nil {
			return nil, Matrix{}, nil, err
		}
		if feats.Rows != n {
			return nil, Matrix{}, nil, &ShapeError{Op: "MergeDuplicates", Arg: "feats", Want: fmt.Sprintf("[%d, C]", n), Got: feats.Shape()}
		}
	}
	index, err := hash.New(hash.Options{Capacity: n, Narrow: ext.KeyBits() == 32})
	if err != nil {
		return nil, Matrix{}, nil, fmt.Errorf("%w: MergeDuplicates: %w", ErrIndexOverflow, err)
	}
	inverse = make([]int32, n)
	var counts []int
	for r := range n {
		c := coords[4*r : 4*r+4]
		k := ext.Key(int(c[0]), int(c[1]), int(c[2]), int(c[3]))
		u, added, err := index.GetOrInsert(k, int32(len(counts)))
		if err != nil {
			return nil, Matrix{}, nil, fmt.Errorf("%w: MergeDuplicates: %w", ErrIndexOverflow, err) // unreachable: keys of a valid extent fit
		}
		if added {
			outCoords = append(outCoords, c...)
			counts = append(counts, 0)
		}
		counts[u]++
		inverse[r] = u
	}
	if feats.IsZero() {
		return outCoords, Matrix{}, inverse, nil
	}
	switch d := feats.Data.(type) {
	case []float32:
		outFeats = Matrix{Rows: len(counts), Cols: feats.Cols, Data: mergeRows(d, feats.Cols, inverse, counts, how)}
	case []float64:
		outFeats = Matrix{Rows: len(counts), Cols: feats.Cols, Data: mergeRows(d, feats.Cols, inverse, counts, how)}
	default:
		return nil, Matrix{}, nil, fmt.Errorf("%w: MergeDuplicates features of %T", ErrDType, feats.Data)
	}
	return outCoords, outFeats, inverse, nil
}

func mergeRows[T Float](x []T, c int, inverse []int32, counts []int, how Reduce) []T {
	out := make([]T, len(counts)*c)
	for r, u := range inverse {
		dst := out[int(u)*c : int(u)*c+c]
		for j, v := range x[r*c : r*c+c] {
			dst[j] += v
		}
	}
	if how == Mean {
		for u, k := range counts {
			if k > 1 {
				dst := out[u*c : u*c+c]
				for j := range dst {
					dst[j] /= T(k)
				}
			}
		}
	}
	return out
}
