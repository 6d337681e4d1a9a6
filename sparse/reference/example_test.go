package reference_test

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/reference"
)

// A 3-tap kernel along x over three active sites of a line: every output
// sums its left neighbour ×1, itself ×10 and its right neighbour ×100.
func ExampleSubmanifoldConv3d() {
	in := reference.Sparse{
		Coords: []int32{0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0},
		Feats:  []float64{1, 2, 3},
		C:      1,
		Extent: grid.Extent{Batch: 1, X: 4, Y: 1, Z: 1},
	}
	w := reference.Weight{W: []float64{1, 10, 100}, Co: 1, Ci: 1, K: [3]int{3, 1, 1}}
	fmt.Println(reference.SubmanifoldConv3d(in, w, nil, [3]int{1, 1, 1}))
	// Output: [210 21 30]
}
