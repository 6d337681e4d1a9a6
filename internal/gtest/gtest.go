// Package gtest holds test helpers shared by the tests of packages ops and
// grad: random coordinates and dense tensors, one kernel map of every kind,
// graph inputs and a simple cost. It is imported by tests only.
package gtest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// RandCoords returns n unique random sites of ext as flat [n, 4] int32.
func RandCoords(rng *rand.Rand, ext grid.Extent, n int) []int32 {
	sites := int(ext.Sites())
	perm := rng.Perm(sites)[:n]
	out := make([]int32, 0, 4*n)
	for _, k := range perm {
		b, x, y, z := ext.Unkey(uint64(k))
		out = append(out, int32(b), int32(x), int32(y), int32(z))
	}
	return out
}

// Map describes one kernel map of the test suite.
type Map struct {
	Name string
	M    *kmap.Map
}

// Maps builds one map of every kind over a small random point cloud,
// plus a strided map with a non-cubic kernel.
func Maps(t testing.TB, seed uint64) []Map {
	rng := rand.New(rand.NewPCG(seed, 1))
	ext := grid.Extent{Batch: 2, X: 5, Y: 4, Z: 5}
	coords := RandCoords(rng, ext, 22)
	subm, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	strided, err := kmap.NewStrided(coords, ext, grid.Cube(2, 2, 0, 1), nil)
	require.NoError(t, err)
	inverse, err := kmap.NewInverse(strided)
	require.NoError(t, err)
	odd := grid.Conv{Kernel: [3]int{3, 1, 2}, Stride: [3]int{2, 1, 1}, Padding: [3]int{1, 0, 0}, Dilation: [3]int{1, 1, 2}}
	oddStrided, err := kmap.NewStrided(coords, ext, odd, nil)
	require.NoError(t, err)
	coarse := grid.Extent{Batch: 2, X: 3, Y: 3, Z: 2}
	transposed, err := kmap.NewTransposed(RandCoords(rng, coarse, 7), coarse, grid.Cube(3, 2, 1, 1))
	require.NoError(t, err)
	return []Map{
		{"submanifold", subm},
		{"strided", strided},
		{"inverse", inverse},
		{"strided-noncubic", oddStrided},
		{"transposed", transposed},
	}
}

// RandDense returns a dense tensor of the given dtype and shape with
// values uniform in [-1, 1).
func RandDense(rng *rand.Rand, dt tensor.Dtype, shape ...int) *tensor.Dense {
	n := tensor.Shape(shape).TotalSize()
	switch dt {
	case tensor.Float32:
		d := make([]float32, n)
		for i := range d {
			d[i] = float32(2*rng.Float64() - 1)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(d))
	default:
		d := make([]float64, n)
		for i := range d {
			d[i] = 2*rng.Float64() - 1
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(d))
	}
}

// Input adds a named input node bound to v.
func Input(g *gorgonia.ExprGraph, name string, v *tensor.Dense) *gorgonia.Node {
	return gorgonia.NewTensor(g, v.Dtype(), v.Dims(), gorgonia.WithShape(v.Shape().Clone()...), gorgonia.WithValue(v), gorgonia.WithName(name))
}

// SumSquares is the test cost Σ y² / 2.
func SumSquares(y *gorgonia.Node) (*gorgonia.Node, error) {
	sq, err := gorgonia.Square(y)
	if err != nil {
		return nil, err
	}
	s, err := gorgonia.Sum(sq)
	if err != nil {
		return nil, err
	}
	return gorgonia.Mul(s, gorgonia.NewConstant(half(y.Dtype())))
}

// half returns 0.5 in dtype dt.
func half(dt tensor.Dtype) any {
	if dt == tensor.Float32 {
		return float32(0.5)
	}
	return 0.5
}

// Name joins the parts of a subtest name.
func Name(parts ...any) string { return fmt.Sprint(parts...) }
