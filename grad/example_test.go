package grad_test

import (
	"fmt"
	"log"

	"github.com/flexgemm-go/flexgemm/grad"
	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

var (
	lineExt    = grid.Extent{Batch: 1, X: 4, Y: 1, Z: 1}
	lineCoords = []int32{0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0}
	pairX      = grid.Conv{Kernel: [3]int{2, 1, 1}, Stride: [3]int{2, 1, 1}, Dilation: [3]int{1, 1, 1}}
)

func matrix(g *gorgonia.ExprGraph, name string, rows, cols int, data ...float64) *gorgonia.Node {
	return gorgonia.NewMatrix(g, gorgonia.Float64, gorgonia.WithShape(rows, cols), gorgonia.WithName(name),
		gorgonia.WithValue(tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(data))))
}

func run(g *gorgonia.ExprGraph) {
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		log.Fatal(err)
	}
}

func lineMap() *kmap.Map {
	m, err := kmap.NewSubmanifold(lineCoords, lineExt, [3]int{3, 1, 1}, [3]int{1, 1, 1})
	if err != nil {
		log.Fatal(err)
	}
	return m
}

func ExampleConvInputGrad() {
	m := lineMap()
	g := gorgonia.NewGraph()
	dy := matrix(g, "dy", 4, 1, 1, 0, 0, 0) // the gradient of output 0 only
	w := gorgonia.NewTensor(g, gorgonia.Float64, 5, gorgonia.WithShape(1, 3, 1, 1, 1), gorgonia.WithName("w"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(1, 3, 1, 1, 1), tensor.WithBacking([]float64{1, 10, 100}))))
	dx := gorgonia.Must(grad.ConvInputGrad(dy, w, m, sparse.ConvOptions{}))
	run(g)
	// Output 0 read input 0 through the centre tap and input 1 through
	// the right tap.
	fmt.Println(dx.Value().Data())
	// Output: [10 100 0 0]
}

func ExampleConvWeightGrad() {
	m := lineMap()
	g := gorgonia.NewGraph()
	x := matrix(g, "x", 4, 1, 1, 2, 3, 4)
	dy := matrix(g, "dy", 4, 1, 1, 1, 1, 1)
	dw := gorgonia.Must(grad.ConvWeightGrad(x, dy, m, sparse.ConvOptions{}))
	run(g)
	// Per tap: the sum of the inputs that tap reads.
	fmt.Println(dw.Shape(), dw.Value().Data())
	// Output: (1, 3, 1, 1, 1) [6 10 9]
}

func ExampleBiasGrad() {
	g := gorgonia.NewGraph()
	dy := matrix(g, "dy", 3, 2, 1, 2, 3, 4, 5, 6)
	db := gorgonia.Must(grad.BiasGrad(dy))
	run(g)
	fmt.Println(db.Value().Data())
	// Output: [9 12]
}

func ExampleMaxPoolGrad() {
	m, err := kmap.NewStrided(lineCoords, lineExt, pairX, nil)
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	x := matrix(g, "x", 4, 1, 1, 5, 2, 4)
	dy := matrix(g, "dy", 2, 1, 10, 20)
	dx := gorgonia.Must(grad.MaxPoolGrad(x, dy, m))
	run(g)
	fmt.Println(dx.Value().Data())
	// Output: [0 10 0 20]
}

func ExampleAvgPoolGrad() {
	m, err := kmap.NewStrided(lineCoords, lineExt, pairX, nil)
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	dy := matrix(g, "dy", 2, 1, 10, 20)
	dx := gorgonia.Must(grad.AvgPoolGrad(dy, m))
	run(g)
	fmt.Println(dx.Value().Data())
	// Output: [5 5 10 10]
}

func ExampleGridSampleFeatGrad() {
	s, err := grad.NewSampleGrid(lineCoords, lineExt, sparse.Trilinear)
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	points := matrix(g, "points", 1, 3, 2.25, 0.5, 0.5) // between voxels 1 and 2
	dy := matrix(g, "dy", 1, 1, 1)
	dFeats := gorgonia.Must(grad.GridSampleFeatGrad(points, dy, s))
	run(g)
	fmt.Println(dFeats.Value().Data())
	// Output: [0 0.25 0.75 0]
}

func ExampleGridSamplePointGrad() {
	s, err := grad.NewSampleGrid(lineCoords, lineExt, sparse.Trilinear)
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	feats := matrix(g, "feats", 4, 1, 10, 20, 30, 40)
	points := matrix(g, "points", 1, 3, 2.25, 0.5, 0.5)
	dy := matrix(g, "dy", 1, 1, 1)
	dPoints := gorgonia.Must(grad.GridSamplePointGrad(feats, points, dy, s))
	run(g)
	// The blend rises by 10 per voxel along x; y and z are at the centre
	// of a one-voxel axis.
	fmt.Println(dPoints.Value().Data())
	// Output: [10 0 0]
}

func ExampleCheck() {
	m, err := kmap.NewStrided(lineCoords, lineExt, pairX, nil)
	if err != nil {
		log.Fatal(err)
	}
	x := tensor.New(tensor.WithShape(4, 2), tensor.WithBacking([]float64{0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8}))
	w := tensor.New(tensor.WithShape(3, 2, 1, 1, 2), tensor.WithBacking([]float64{
		0.5, -0.1, 0.2, 0.3, -0.4, 0.6, 0.1, 0.2, 0.9, -0.7, 0.3, 0.8}))
	b := tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{0.1, 0.2, -0.3}))
	rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		y, err := ops.SparseConv3d(in[0], in[1], m, ops.WithBias(in[2]))
		if err != nil {
			return nil, err
		}
		t, err := gorgonia.Tanh(y)
		if err != nil {
			return nil, err
		}
		return gorgonia.Sum(t)
	}, []*tensor.Dense{x, w, b})
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range rep.Inputs {
		fmt.Printf("input %d %v: tape ok %v (err < 1e-8: %v), lisp ok %v\n", in.Index, in.Shape,
			in.Tape.Pass, in.Tape.MaxAbsErr < 1e-8, in.Lisp.Pass)
	}
	// Output:
	// input 0 (4, 2): tape ok true (err < 1e-8: true), lisp ok true
	// input 1 (3, 2, 1, 1, 2): tape ok true (err < 1e-8: true), lisp ok true
	// input 2 (3): tape ok true (err < 1e-8: true), lisp ok true
}

func ExampleNewSampleGrid() {
	s, err := grad.NewSampleGrid(lineCoords, lineExt, sparse.Nearest)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Voxels(), s.Extent(), s.Mode())
	_, err = grad.NewSampleGrid([]int32{0, 9, 0, 0}, lineExt, sparse.Nearest)
	fmt.Println(err)
	// Output:
	// 4 Extent{Batch:1 X:4 Y:1 Z:1} nearest
	// sparse: coordinate out of range: grad: NewSampleGrid: row 0 [0 9 0 0] is outside Extent{Batch:1 X:4 Y:1 Z:1}
}
