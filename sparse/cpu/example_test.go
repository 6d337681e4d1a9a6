package cpu_test

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/cpu"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// A submanifold 3×3×3 convolution of two neighbouring voxels with one
// channel: the centre tap weighs 2 and the tap towards +z weighs 1, so each
// output is twice its own input plus its +z neighbour's. The gradients
// follow from the same two taps.
func Example() {
	coords := []int32{0, 1, 1, 1, 0, 1, 1, 2}
	m, err := kmap.NewSubmanifold(coords, grid.Extent{Batch: 1, X: 3, Y: 3, Z: 3}, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	if err != nil {
		panic(err)
	}
	x := []float32{10, 1}
	w := make([]float32, 27) // [Co=1, 3, 3, 3, Ci=1]
	w[13], w[14] = 2, 1      // taps (1,1,1) and (1,1,2)
	opt := cpu.Options{Method: cpu.Masked}

	y := make([]float32, 2)
	_ = cpu.Forward(m, x, 1, w, 1, []float32{0.5}, y, opt)
	dy := []float32{1, 1}
	dx := make([]float32, 2)
	_ = cpu.InputGrad(m, dy, 1, w, 1, dx, opt)
	dw := make([]float32, 27)
	_ = cpu.WeightGrad(m, x, 1, dy, 1, dw, opt)
	db := make([]float32, 1)
	_ = cpu.BiasGrad(dy, 1, db)
	fmt.Println("y", y, "dx", dx, "dw[13]", dw[13], "dw[14]", dw[14], "dw[12]", dw[12], "db", db)
	// Output: y [21.5 2.5] dx [2 3] dw[13] 11 dw[14] 1 dw[12] 10 db [2]
}
