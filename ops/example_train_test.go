package ops_test

import (
	"fmt"
	"log"
	"math/rand/v2"

	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Example trains one submanifold convolution with the graph-per-batch
// pattern: every batch has its own coordinates, kernel map and graph; the
// weight is a shared tensor that Adam updates in place.
func Example() {
	rng := rand.New(rand.NewPCG(1, 2))
	ext := grid.Extent{Batch: 1, X: 6, Y: 6, Z: 6}
	// The target is a fixed "true" convolution of the features.
	trueW := tensor.New(tensor.WithShape(2, 3, 3, 3, 2), tensor.WithBacking(randFloats(rng, 2*27*2)))
	w := tensor.New(tensor.Of(tensor.Float64), tensor.WithShape(2, 3, 3, 3, 2)) // learnable, zeros
	solver := gorgonia.NewAdamSolver(gorgonia.WithLearnRate(0.05))

	var first, last float64
	for step := range 40 {
		// Eager, outside the graph: this batch's voxels and kernel map.
		coords := randCoords(rng, ext, 30+step%5)
		m, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
		if err != nil {
			log.Fatal(err)
		}
		feats := tensor.New(tensor.WithShape(m.NIn, 2), tensor.WithBacking(randFloats(rng, m.NIn*2)))
		target, err := sparse.Conv(m, sparse.Matrix{Rows: m.NIn, Cols: 2, Data: feats.Data()},
			sparse.Matrix{Rows: 2, Cols: 27 * 2, Data: trueW.Data()}, sparse.Matrix{}, sparse.ConvOptions{})
		if err != nil {
			log.Fatal(err)
		}

		// The graph of this batch.
		g := gorgonia.NewGraph()
		x := gorgonia.NewMatrix(g, gorgonia.Float64, gorgonia.WithShape(m.NIn, 2), gorgonia.WithValue(feats), gorgonia.WithName("x"))
		wn := gorgonia.NewTensor(g, gorgonia.Float64, 5, gorgonia.WithShape(w.Shape()...), gorgonia.WithValue(w), gorgonia.WithName("w"))
		tn := gorgonia.NewMatrix(g, gorgonia.Float64, gorgonia.WithShape(m.NOut, 2), gorgonia.WithName("target"),
			gorgonia.WithValue(tensor.New(tensor.WithShape(m.NOut, 2), tensor.WithBacking(target.Data))))
		y := gorgonia.Must(ops.SubMConv3d(x, wn, m, ops.WithAlgorithm(sparse.MaskedImplicit)))
		loss := gorgonia.Must(gorgonia.Mean(gorgonia.Must(gorgonia.Square(gorgonia.Must(gorgonia.Sub(y, tn))))))

		learnables := gorgonia.Nodes{wn} // same order every step
		if _, err := gorgonia.Grad(loss, learnables...); err != nil {
			log.Fatal(err)
		}
		vm := gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(learnables...))
		if err := vm.RunAll(); err != nil {
			log.Fatal(err)
		}
		if err := solver.Step(gorgonia.NodesToValueGrads(learnables)); err != nil {
			log.Fatal(err)
		}
		vm.Close()

		l := loss.Value().Data().(float64)
		if step == 0 {
			first = l
		}
		last = l
	}
	fmt.Printf("loss fell below a tenth of its start: %v\n", last < first/10)
	// Output: loss fell below a tenth of its start: true
}

func randFloats(rng *rand.Rand, n int) []float64 {
	d := make([]float64, n)
	for i := range d {
		d[i] = 2*rng.Float64() - 1
	}
	return d
}
