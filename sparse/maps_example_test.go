package sparse_test

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// line returns a tensor of voxels at x = 0, 1 and 3 on a 4×1×1 grid.
func line() *sparse.Tensor {
	coords := []int32{0, 0, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0}
	t, err := sparse.NewTensor(coords, sparse.NewMatrix[float32](3, 1), sparse.Extent{Batch: 1, X: 4, Y: 1, Z: 1})
	if err != nil {
		panic(err)
	}
	return t
}

// pairX pairs neighbouring voxels along x: kernel 2, stride 2.
var pairX = grid.Conv{Kernel: [3]int{2, 1, 1}, Stride: [3]int{2, 1, 1}, Dilation: [3]int{1, 1, 1}}

func printMap(m *kmap.Map) {
	for o := range m.NOut {
		fmt.Println("out", m.OutCoords[4*o:4*o+4], "reads", m.Nbr[o*m.V():(o+1)*m.V()])
	}
}

func ExampleSubmanifoldMap() {
	// A 3×1×1 kernel: taps read x−1, x and x+1.
	m, err := sparse.SubmanifoldMap(line(), [3]int{3, 1, 1}, [3]int{1, 1, 1})
	if err != nil {
		panic(err)
	}
	printMap(m)
	// Output:
	// out [0 0 0 0] reads [-1 0 1]
	// out [0 1 0 0] reads [0 1 -1]
	// out [0 3 0 0] reads [-1 2 -1]
}

func ExampleStridedMap() {
	m, err := sparse.StridedMap(line(), pairX, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Out)
	printMap(m)
	// Output:
	// Extent{Batch:1 X:2 Y:1 Z:1}
	// out [0 0 0 0] reads [0 1]
	// out [0 1 0 0] reads [-1 2]
}

func ExampleInverseMap() {
	down, err := sparse.StridedMap(line(), pairX, nil)
	if err != nil {
		panic(err)
	}
	up, err := sparse.InverseMap(down)
	if err != nil {
		panic(err)
	}
	fmt.Println(up.Out)
	printMap(up)
	// Output:
	// Extent{Batch:1 X:4 Y:1 Z:1}
	// out [0 0 0 0] reads [0 -1]
	// out [0 1 0 0] reads [-1 0]
	// out [0 3 0 0] reads [-1 1]
}

func ExampleTransposedMap() {
	coarse, err := sparse.NewTensor([]int32{0, 1, 0, 0}, sparse.NewMatrix[float32](1, 1), sparse.Extent{Batch: 1, X: 2, Y: 1, Z: 1})
	if err != nil {
		panic(err)
	}
	m, err := sparse.TransposedMap(coarse, pairX)
	if err != nil {
		panic(err)
	}
	fmt.Println(m.Out)
	printMap(m)
	// Output:
	// Extent{Batch:1 X:4 Y:1 Z:1}
	// out [0 2 0 0] reads [0 -1]
	// out [0 3 0 0] reads [-1 0]
}
