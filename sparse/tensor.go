package sparse

import (
	"fmt"
	"math"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// Extent is the size of a batched voxel grid (see grid.Extent).
type Extent = grid.Extent

// Tensor is a sparse 3D tensor: N active voxels of a batched grid with C
// features each.
type Tensor struct {
	// Coords holds [N, 4] int32 coordinates (batch, x, y, z), row-major.
	Coords []int32
	// Feats holds the [N, C] features; row r belongs to Coords row r.
	Feats Matrix
	// Extent is the grid the coordinates live in.
	Extent Extent
}

// NewTensor validates coords, feats and ext and returns a Tensor that
// shares their memory. It reports, each as a wrapped sentinel error naming
// the offending row: a coordinate array whose length is not a multiple of 4
// or disagrees with feats (ErrShape), a negative batch index or coordinate
// outside ext (ErrOutOfRange), and two rows with the same coordinate
// (ErrDuplicate; see MergeDuplicates). N = 0 is valid.
func NewTensor(coords []int32, feats Matrix, ext Extent) (*Tensor, error) {
	if err := ValidateCoords(coords, ext); err != nil {
		return nil, err
	}
	if err := feats.Validate(); err != nil {
		return nil, fmt.Errorf("sparse: NewTensor: features: %w", err)
	}
	if n := len(coords) / 4; feats.Rows != n {
		return nil, &ShapeError{Op: "NewTensor", Arg: "feats", Want: fmt.Sprintf("[%d, C]", n), Got: feats.Shape()}
	}
	return &Tensor{Coords: coords, Feats: feats, Extent: ext}, nil
}

// N returns the number of active voxels.
func (t *Tensor) N() int { return len(t.Coords) / 4 }

// C returns the number of feature channels.
func (t *Tensor) C() int { return t.Feats.Cols }

// Coord returns row r's coordinate as (batch, x, y, z).
func (t *Tensor) Coord(r int) [4]int32 {
	c := t.Coords[4*r : 4*r+4]
	return [4]int32{c[0], c[1], c[2], c[3]}
}

// WithFeats returns a tensor with the same coordinates and extent and new
// features, which must have N rows.
func (t *Tensor) WithFeats(feats Matrix) (*Tensor, error) {
	if err := feats.Validate(); err != nil {
		return nil, err
	}
	if feats.Rows != t.N() {
		return nil, &ShapeError{Op: "WithFeats", Arg: "feats", Want: fmt.Sprintf("[%d, C]", t.N()), Got: feats.Shape()}
	}
	return &Tensor{Coords: t.Coords, Feats: feats, Extent: t.Extent}, nil
}

// ValidateCoords checks a flat [N, 4] coordinate array against ext: length,
// 32-bit row indices, range, and uniqueness.
func ValidateCoords(coords []int32, ext Extent) error {
	if err := ext.Validate(); err != nil {
		return fmt.Errorf("sparse: %w", err)
	}
	if len(coords)%4 != 0 {
		return fmt.Errorf("%w: coordinate array of length %d is not [N, 4]", ErrShape, len(coords))
	}
	n := len(coords) / 4
	if n > math.MaxInt32-1 {
		return fmt.Errorf("%w: %d rows exceed 32-bit row indices", ErrIndexOverflow, n)
	}
	if err := checkRange(coords, ext); err != nil {
		return err
	}
	if r, q, dup := FindDuplicate(coords, ext); dup {
		c := coords[4*r : 4*r+4]
		return fmt.Errorf("%w: rows %d and %d are both (%d, %d, %d, %d); merge them with MergeDuplicates", ErrDuplicate, q, r, c[0], c[1], c[2], c[3])
	}
	return nil
}

func checkRange(coords []int32, ext Extent) error {
	for r := 0; r < len(coords)/4; r++ {
		c := coords[4*r : 4*r+4]
		if c[0] < 0 {
			return fmt.Errorf("%w: row %d has negative batch index %d", ErrOutOfRange, r, c[0])
		}
		if !ext.Contains(int(c[0]), int(c[1]), int(c[2]), int(c[3])) {
			return fmt.Errorf("%w: row %d (%d, %d, %d, %d) is outside %v", ErrOutOfRange, r, c[0], c[1], c[2], c[3], ext)
		}
	}
	return nil
}
