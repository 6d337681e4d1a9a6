package ops_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/serialize"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func coordsDense(c []int32) *tensor.Dense {
	return tensor.New(tensor.WithShape(len(c)/4, 4), tensor.WithBacking(c))
}

func TestSerializeMatchesPackage(t *testing.T) {
	ext := grid.Extent{Batch: 3, X: 9, Y: 5, Z: 7}
	rng := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{1, 2, 40} {
		for _, mode := range []serialize.Mode{serialize.ZOrder, serialize.Hilbert} {
			coords := randCoords(rng, ext, n)
			want := make([]uint64, n)
			require.NoError(t, serialize.Encode(mode, coords, ext, want))

			g := gorgonia.NewGraph()
			c := input(g, "coords", coordsDense(coords))
			codes, err := ops.Serialize(c, ext, mode)
			require.NoError(t, err)
			require.Equal(t, tensor.Int64, codes.Dtype())
			require.Equal(t, tensor.Shape{n}, codes.Shape())
			back, err := ops.Deserialize(codes, ext, mode)
			require.NoError(t, err)
			require.Equal(t, tensor.Int32, back.Dtype())
			require.Equal(t, tensor.Shape{n, 4}, back.Shape())
			vm := gorgonia.NewTapeMachine(g)
			require.NoError(t, vm.RunAll())
			vm.Close()

			got := codes.Value().Data().([]int64)
			for i := range want {
				require.Equal(t, int64(want[i]), got[i])
			}
			require.Equal(t, coords, back.Value().Data().([]int32))
		}
	}
}

// TestSerializeInDifferentiatedGraph: a chain of serialisation nodes next
// to a convolution must not stop gorgonia.Grad, and both run.
func TestSerializeInDifferentiatedGraph(t *testing.T) {
	m := testMaps(t, 9)[0].M
	rng := rand.New(rand.NewPCG(9, 9))
	g := gorgonia.NewGraph()
	x := input(g, "x", randDense(rng, tensor.Float64, m.NIn, 2))
	w := input(g, "w", randDense(rng, tensor.Float64, weightShape(m, 2, 2)...))
	c := input(g, "coords", coordsDense(m.OutCoords))
	codes, err := ops.Serialize(c, m.In, serialize.Hilbert)
	require.NoError(t, err)
	coords2, err := ops.Deserialize(codes, m.In, serialize.Hilbert)
	require.NoError(t, err)
	codes2, err := ops.Serialize(coords2, m.In, serialize.ZOrder)
	require.NoError(t, err)
	y, err := ops.SubMConv3d(x, w, m)
	require.NoError(t, err)
	cost, err := sumSquares(y)
	require.NoError(t, err)
	grads, err := gorgonia.Grad(cost, x, w)
	require.NoError(t, err)
	require.Len(t, grads, 2)
	vm := gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(x, w))
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	require.Equal(t, m.OutCoords, coords2.Value().Data().([]int32))
	want := make([]uint64, m.NOut)
	require.NoError(t, serialize.Encode(serialize.ZOrder, m.OutCoords, m.In, want))
	for i, v := range codes2.Value().Data().([]int64) {
		require.Equal(t, int64(want[i]), v)
	}
	xg, err := x.Grad()
	require.NoError(t, err)
	require.Equal(t, tensor.Shape{m.NIn, 2}, xg.Shape())

	// The LispMachine, forward only, runs the same graph.
	lm := gorgonia.NewLispMachine(g, gorgonia.ExecuteFwdOnly())
	defer lm.Close()
	require.NoError(t, lm.RunAll())
	require.Equal(t, m.OutCoords, coords2.Value().Data().([]int32))
}

func TestSerializeErrors(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 4, Y: 4, Z: 4}
	g := gorgonia.NewGraph()
	c := input(g, "c", coordsDense([]int32{0, 1, 2, 3, 1, 3, 3, 3}))
	c64 := input(g, "c64", tensor.New(tensor.WithShape(2, 4), tensor.WithBacking([]int64{0, 1, 2, 3, 1, 3, 3, 3})))
	c3 := input(g, "c3", tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]int32{0, 1, 2, 1, 3, 3})))
	f := input(g, "f", tensor.New(tensor.WithShape(2, 4), tensor.WithBacking(make([]float64, 8))))
	codes := input(g, "codes", tensor.New(tensor.WithShape(2), tensor.WithBacking([]int64{1, 2})))
	huge := grid.Extent{Batch: 1 << 10, X: 1 << 21, Y: 1, Z: 1}
	cases := []struct {
		name string
		run  func() (*gorgonia.Node, error)
		want error
		text string
	}{
		{"int64 coords", func() (*gorgonia.Node, error) { return ops.Serialize(c64, ext, serialize.ZOrder) }, sparse.ErrDType, "coords has dtype int64, want int32"},
		{"float coords", func() (*gorgonia.Node, error) { return ops.Serialize(f, ext, serialize.ZOrder) }, sparse.ErrDType, "float64"},
		{"shape", func() (*gorgonia.Node, error) { return ops.Serialize(c3, ext, serialize.ZOrder) }, sparse.ErrShape, "[N, 4]"},
		{"mode", func() (*gorgonia.Node, error) { return ops.Serialize(c, ext, serialize.Mode(9)) }, serialize.ErrMode, "Mode(9)"},
		{"too large", func() (*gorgonia.Node, error) { return ops.Serialize(c, huge, serialize.ZOrder) }, serialize.ErrTooLarge, "bits"},
		{"bad extent", func() (*gorgonia.Node, error) { return ops.Serialize(c, grid.Extent{}, serialize.ZOrder) }, serialize.ErrExtent, "non-positive"},
		{"nil", func() (*gorgonia.Node, error) { return ops.Serialize(nil, ext, serialize.ZOrder) }, ops.ErrNilInput, "coords is nil"},
		{"decode dtype", func() (*gorgonia.Node, error) { return ops.Deserialize(c, ext, serialize.ZOrder) }, sparse.ErrDType, "codes has dtype int32, want int64"},
		{"decode shape", func() (*gorgonia.Node, error) { return ops.Deserialize(c64, ext, serialize.ZOrder) }, sparse.ErrShape, "[N]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, err := tc.run()
			require.Error(t, err)
			require.Nil(t, n)
			require.True(t, errors.Is(err, tc.want), "%v does not wrap %v", err, tc.want)
			require.Contains(t, err.Error(), tc.text)
		})
	}
	_, err := ops.Deserialize(codes, ext, serialize.Hilbert)
	require.NoError(t, err)
}

func TestSerializeRunErrors(t *testing.T) {
	// 3·21 + 1 = 64 code bits: batch 1 sets the top bit.
	ext := grid.Extent{Batch: 2, X: 1 << 21, Y: 4, Z: 4}
	run := func(build func(g *gorgonia.ExprGraph) (*gorgonia.Node, error)) error {
		g := gorgonia.NewGraph()
		_, err := build(g)
		require.NoError(t, err)
		vm := gorgonia.NewTapeMachine(g)
		defer vm.Close()
		return vm.RunAll()
	}
	err := run(func(g *gorgonia.ExprGraph) (*gorgonia.Node, error) {
		return ops.Serialize(input(g, "c", coordsDense([]int32{0, 5, 1, 1, 1, 5, 1, 1})), ext, serialize.ZOrder)
	})
	// Gorgonia's VM error (vmContextualError) has no Unwrap, so check text.
	require.Error(t, err)
	require.Contains(t, err.Error(), serialize.ErrTooLarge.Error())
	require.Contains(t, err.Error(), "row 1 is 2^63 or more")

	// Batch 0 only: fits.
	require.NoError(t, run(func(g *gorgonia.ExprGraph) (*gorgonia.Node, error) {
		return ops.Serialize(input(g, "c", coordsDense([]int32{0, 5, 1, 1})), ext, serialize.ZOrder)
	}))

	small := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	for _, tc := range []struct {
		codes []int64
		text  string
	}{
		{[]int64{3, -1}, "code -1 at index 1 is negative"},
		{[]int64{1 << 40}, "is not a site"},
	} {
		err := run(func(g *gorgonia.ExprGraph) (*gorgonia.Node, error) {
			return ops.Deserialize(input(g, "codes", tensor.New(tensor.WithShape(len(tc.codes)), tensor.WithBacking(tc.codes))), small, serialize.ZOrder)
		})
		require.Error(t, err)
		require.Contains(t, err.Error(), serialize.ErrOutOfRange.Error())
		require.Contains(t, err.Error(), tc.text)
	}
}
