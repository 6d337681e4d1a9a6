package ops_test

import (
	"fmt"
	"log"

	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/serialize"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// lineCoords is a row of four voxels along x in a 4×1×1 grid.
var (
	lineExt    = grid.Extent{Batch: 1, X: 4, Y: 1, Z: 1}
	lineCoords = []int32{0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0}
	// pairX pools pairs of voxels along x.
	pairX = grid.Conv{Kernel: [3]int{2, 1, 1}, Stride: [3]int{2, 1, 1}, Dilation: [3]int{1, 1, 1}}
)

func matrix(g *gorgonia.ExprGraph, name string, rows, cols int, data ...float64) *gorgonia.Node {
	return gorgonia.NewMatrix(g, gorgonia.Float64, gorgonia.WithShape(rows, cols), gorgonia.WithName(name),
		gorgonia.WithValue(tensor.New(tensor.WithShape(rows, cols), tensor.WithBacking(data))))
}

func weight(g *gorgonia.ExprGraph, name string, shape []int, data ...float64) *gorgonia.Node {
	return gorgonia.NewTensor(g, gorgonia.Float64, 5, gorgonia.WithShape(shape...), gorgonia.WithName(name),
		gorgonia.WithValue(tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))))
}

func run(g *gorgonia.ExprGraph) {
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		log.Fatal(err)
	}
}

func ExampleSubMConv3d() {
	m, err := kmap.NewSubmanifold(lineCoords, lineExt, [3]int{3, 1, 1}, [3]int{1, 1, 1})
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	x := matrix(g, "x", 4, 1, 1, 2, 3, 4)
	// w [Co=1, Kx=3, Ky=1, Kz=1, Ci=1]: left neighbour, centre, right neighbour.
	w := weight(g, "w", []int{1, 3, 1, 1, 1}, 1, 10, 100)
	b := gorgonia.NewVector(g, gorgonia.Float64, gorgonia.WithShape(1), gorgonia.WithName("b"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{0.5}))))
	y := gorgonia.Must(ops.SubMConv3d(x, w, m, ops.WithBias(b), ops.WithAlgorithm(sparse.Explicit)))
	run(g)
	fmt.Println(y.Shape(), y.Value().Data())
	// Output: (4, 1) [210.5 321.5 432.5 43.5]
}

func ExampleSparseConv3d() {
	m, err := kmap.NewStrided(lineCoords, lineExt, pairX, nil)
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	x := matrix(g, "x", 4, 1, 1, 2, 3, 4)
	w := weight(g, "w", []int{1, 2, 1, 1, 1}, 1, 10)
	y := gorgonia.Must(ops.SparseConv3d(x, w, m))
	run(g)
	fmt.Println(m.OutCoords, y.Value().Data())
	// Output: [0 0 0 0 0 1 0 0] [21 43]
}

func ExampleInverseConv3d() {
	down, err := kmap.NewStrided(lineCoords, lineExt, pairX, nil)
	if err != nil {
		log.Fatal(err)
	}
	up, err := kmap.NewInverse(down)
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	coarse := matrix(g, "coarse", 2, 1, 1, 2)
	w := weight(g, "w", []int{1, 2, 1, 1, 1}, 1, 10)
	y := gorgonia.Must(ops.InverseConv3d(coarse, w, up))
	run(g)
	// Back on the four fine voxels.
	fmt.Println(y.Shape(), y.Value().Data())
	// Output: (4, 1) [1 10 2 20]
}

func ExampleTransposedConv3d() {
	coarseExt := grid.Extent{Batch: 1, X: 2, Y: 1, Z: 1}
	m, err := kmap.NewTransposed([]int32{0, 1, 0, 0}, coarseExt, pairX)
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	x := matrix(g, "x", 1, 1, 3)
	w := weight(g, "w", []int{1, 2, 1, 1, 1}, 1, 10)
	y := gorgonia.Must(ops.TransposedConv3d(x, w, m))
	run(g)
	fmt.Println(m.OutCoords, y.Value().Data())
	// Output: [0 2 0 0 0 3 0 0] [3 30]
}

func ExampleConv3d() {
	// Conv3d accepts a map of any kind; the kind-specific constructors
	// also check the kind.
	m, err := kmap.NewStrided(lineCoords, lineExt, pairX, nil)
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	x := matrix(g, "x", 4, 2, 1, 1, 2, 2, 3, 3, 4, 4)
	// Two output channels: sum and difference of the pair.
	w := weight(g, "w", []int{2, 2, 1, 1, 2}, 1, 0, 1, 0, -1, 0, 1, 0)
	y := gorgonia.Must(ops.Conv3d(x, w, m, ops.WithAlgorithm(sparse.ImplicitSplitK), ops.WithSplitK(2)))
	run(g)
	fmt.Println(y.Shape(), y.Value().Data())

	_, err = ops.SubMConv3d(x, w, m)
	fmt.Println(err)
	// Output:
	// (2, 2) [3 1 7 1]
	// ops: wrong kernel-map kind: ops.SubMConv3d needs a submanifold map, got a strided map
}

func ExampleMaxPool3d() {
	m, err := kmap.NewStrided(lineCoords, lineExt, pairX, nil)
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	x := matrix(g, "x", 4, 1, 1, 5, 2, 4)
	y := gorgonia.Must(ops.MaxPool3d(x, m))
	run(g)
	fmt.Println(y.Value().Data())
	// Output: [5 4]
}

func ExampleAvgPool3d() {
	m, err := kmap.NewStrided(lineCoords, lineExt, pairX, nil)
	if err != nil {
		log.Fatal(err)
	}
	g := gorgonia.NewGraph()
	x := matrix(g, "x", 4, 1, 1, 5, 2, 4)
	y := gorgonia.Must(ops.AvgPool3d(x, m))
	run(g)
	fmt.Println(y.Value().Data())
	// Output: [3 3]
}

func ExampleGridSample3d() {
	g := gorgonia.NewGraph()
	feats := matrix(g, "feats", 4, 1, 10, 20, 30, 40)
	// Voxel x covers [x, x+1); its centre is x + 0.5.
	points := matrix(g, "points", 3, 3,
		1.5, 0.5, 0.5, // centre of voxel 1
		2.0, 0.5, 0.5, // half way between voxels 1 and 2
		2.25, 0.5, 0.5)
	lin := gorgonia.Must(ops.GridSample3d(feats, points, lineCoords, lineExt, sparse.Trilinear))
	near := gorgonia.Must(ops.GridSample3d(feats, points, lineCoords, lineExt, sparse.Nearest))
	run(g)
	fmt.Println(lin.Value().Data(), near.Value().Data())
	// Output: [20 25 27.5] [20 30 30]
}

func ExampleSerialize() {
	g := gorgonia.NewGraph()
	coords := gorgonia.NewMatrix(g, tensor.Int32, gorgonia.WithShape(3, 4), gorgonia.WithName("coords"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(3, 4), tensor.WithBacking([]int32{
			0, 1, 0, 0,
			0, 0, 1, 0,
			1, 1, 1, 1,
		}))))
	ext := grid.Extent{Batch: 2, X: 2, Y: 2, Z: 2}
	codes := gorgonia.Must(ops.Serialize(coords, ext, serialize.ZOrder))
	run(g)
	fmt.Println(codes.Dtype(), codes.Value().Data())
	// Output: int64 [4 2 15]
}

func ExampleDeserialize() {
	g := gorgonia.NewGraph()
	codes := gorgonia.NewVector(g, tensor.Int64, gorgonia.WithShape(2), gorgonia.WithName("codes"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(2), tensor.WithBacking([]int64{4, 15}))))
	ext := grid.Extent{Batch: 2, X: 2, Y: 2, Z: 2}
	coords := gorgonia.Must(ops.Deserialize(codes, ext, serialize.ZOrder))
	run(g)
	fmt.Println(coords.Shape(), coords.Value().Data())
	// Output: (2, 4) [0 1 0 0 1 1 1 1]
}
