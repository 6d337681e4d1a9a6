package device_test

import (
	"fmt"
	"log"

	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Example trains a submanifold convolution with every tensor on a device
// (here the CPU emulation; device.OpenCUDA(0) on a GPU): the weight and
// Adam's moments stay on the device across steps, and each step copies
// only its inputs up and the loss down.
func Example() {
	d, err := device.OpenFake()
	if err != nil {
		log.Fatal(err)
	}
	defer d.Close()
	coords := []int32{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 0, 2, 2, 2}
	m, err := kmap.NewSubmanifold(coords, grid.Extent{Batch: 1, X: 3, Y: 3, Z: 3}, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	if err != nil {
		log.Fatal(err)
	}
	w0 := make([]float32, 2*27)
	for i := range w0 {
		w0[i] = float32(i%5-2) / 10
	}
	w, err := d.ToDevice(tensor.New(tensor.WithShape(2, 3, 3, 3, 1), tensor.WithBacking(w0)))
	if err != nil {
		log.Fatal(err)
	}
	labels := []int32{0, 1, 1, 0, 1}
	opt := device.NewAdam(0.1)
	for step := range 3 {
		st, err := d.BeginStep()
		if err != nil {
			log.Fatal(err)
		}
		x, err := d.Input(tensor.New(tensor.WithShape(5, 1), tensor.WithBacking([]float32{1, 2, 3, 4, 5})))
		if err != nil {
			log.Fatal(err)
		}
		g := gorgonia.NewGraph()
		xn := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(5, 1), gorgonia.WithValue(x), gorgonia.WithName("x"))
		wn := gorgonia.NewTensor(g, tensor.Float32, 5, gorgonia.WithShape(2, 3, 3, 3, 1), gorgonia.WithValue(w), gorgonia.WithName("w"))
		y := gorgonia.Must(ops.SubMConv3d(xn, wn, m))
		loss := gorgonia.Must(ops.SoftmaxCrossEntropy(y, labels))
		grads, err := gorgonia.Grad(loss, wn)
		if err != nil {
			log.Fatal(err)
		}
		vm := gorgonia.NewTapeMachine(g, d.VMOpt())
		if err := vm.RunAll(); err != nil {
			log.Fatal(err)
		}
		if err := opt.Step([]*tensor.Dense{w}, []gorgonia.Value{grads[0].Value()}, 1); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("step %d: loss %.4f; copied %v\n", step, loss.Value().Data(), st.Transfers())
		vm.Close()
		if err := st.End(); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// step 0: loss 0.7115; copied inputs ↑40 ↓0, scalars ↑0 ↓4
	// step 1: loss 0.1903; copied inputs ↑40 ↓0, scalars ↑0 ↓4
	// step 2: loss 0.0517; copied inputs ↑40 ↓0, scalars ↑0 ↓4
}
