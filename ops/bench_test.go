package ops_test

import (
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// benchScene is a submanifold layer over 4096 voxels of a 32³ grid with
// 32 → 32 channels.
func benchScene(b *testing.B) (*kmap.Map, *tensor.Dense, *tensor.Dense) {
	rng := rand.New(rand.NewPCG(1, 1))
	ext := grid.Extent{Batch: 1, X: 32, Y: 32, Z: 32}
	m, err := kmap.NewSubmanifold(randCoords(rng, ext, 4096), ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	if err != nil {
		b.Fatal(err)
	}
	return m, randDense(rng, tensor.Float32, m.NIn, 32), randDense(rng, tensor.Float32, 32, 3, 3, 3, 32)
}

// BenchmarkConvDirect is the sparse.Conv call the op makes, for reference.
func BenchmarkConvDirect(b *testing.B) {
	m, xv, wv := benchScene(b)
	x := sparse.Matrix{Rows: m.NIn, Cols: 32, Data: xv.Data()}
	w := sparse.Matrix{Rows: 32, Cols: 27 * 32, Data: wv.Data()}
	for b.Loop() {
		if _, err := sparse.Conv(m, x, w, sparse.Matrix{}, sparse.ConvOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(m.NIn)*float64(b.N)/b.Elapsed().Seconds(), "voxels/s")
}

// BenchmarkConvGraphStep builds a graph, differentiates it and runs one
// forward+backward step in a TapeMachine, as a training loop does per
// batch.
func BenchmarkConvGraphStep(b *testing.B) {
	m, xv, wv := benchScene(b)
	for b.Loop() {
		g := gorgonia.NewGraph()
		x, w := input(g, "x", xv), input(g, "w", wv)
		y, err := ops.SubMConv3d(x, w, m)
		if err != nil {
			b.Fatal(err)
		}
		cost, err := gorgonia.Sum(y)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := gorgonia.Grad(cost, x, w); err != nil {
			b.Fatal(err)
		}
		vm := gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(x, w))
		if err := vm.RunAll(); err != nil {
			b.Fatal(err)
		}
		vm.Close()
	}
	b.ReportMetric(float64(m.NIn)*float64(b.N)/b.Elapsed().Seconds(), "voxels/s")
}
