package ops_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/grad"
	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// awayFromZero returns n values of magnitude in [0.1, 1] with random
// signs, so that finite differences never straddle ReLU's kink.
func awayFromZero(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 0.1 + 0.9*rng.Float64()
		if rng.IntN(2) == 0 {
			v[i] = -v[i]
		}
	}
	return v
}

func TestReLU(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		g := gorgonia.NewGraph()
		in := []float64{-2, -0.5, 0, 0.25, 3, -1}
		var x *gorgonia.Node
		if dt == tensor.Float64 {
			x = gorgonia.NewMatrix(g, dt, gorgonia.WithShape(2, 3), gorgonia.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(in))))
		} else {
			f := make([]float32, len(in))
			for i, v := range in {
				f[i] = float32(v)
			}
			x = gorgonia.NewMatrix(g, dt, gorgonia.WithShape(2, 3), gorgonia.WithValue(tensor.New(tensor.WithShape(2, 3), tensor.WithBacking(f))))
		}
		y, err := ops.ReLU(x)
		require.NoError(t, err)
		vm := gorgonia.NewTapeMachine(g)
		require.NoError(t, vm.RunAll())
		want := []float64{0, 0, 0, 0.25, 3, 0}
		got := toF64(y.Value().Data())
		require.Equal(t, want, got)
		require.Equal(t, tensor.Shape{2, 3}, y.Shape())
		vm.Close()
	}
}

func toF64(d any) []float64 {
	switch s := d.(type) {
	case []float64:
		return append([]float64(nil), s...)
	case []float32:
		out := make([]float64, len(s))
		for i, v := range s {
			out[i] = float64(v)
		}
		return out
	}
	return nil
}

func TestReLUAndConcatGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	a := tensor.New(tensor.WithShape(5, 3), tensor.WithBacking(awayFromZero(rng, 15)))
	b := tensor.New(tensor.WithShape(5, 2), tensor.WithBacking(awayFromZero(rng, 10)))
	w := tensor.New(tensor.WithShape(5, 5), tensor.WithBacking(awayFromZero(rng, 25)))
	rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		c, err := ops.ConcatChannels(in[0], in[1])
		if err != nil {
			return nil, err
		}
		r, err := ops.ReLU(c)
		if err != nil {
			return nil, err
		}
		// A weighted sum, so that every column's gradient differs.
		return gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(r, in[2])))
	}, []*tensor.Dense{a, b, w})
	require.NoError(t, err, "%v", rep)
	require.True(t, rep.OK())
}

func TestConcatChannelsErrors(t *testing.T) {
	g := gorgonia.NewGraph()
	a := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithShape(3, 2), gorgonia.WithName("a"))
	b := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithShape(4, 2), gorgonia.WithName("b"))
	c := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(3, 2), gorgonia.WithName("c"))
	v := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithShape(3), gorgonia.WithName("v"))
	for _, tc := range []struct {
		name string
		xs   []*gorgonia.Node
		want error
	}{
		{"none", nil, ops.ErrNilInput},
		{"nil", []*gorgonia.Node{a, nil}, ops.ErrNilInput},
		{"rows", []*gorgonia.Node{a, b}, sparse.ErrShape},
		{"dtype", []*gorgonia.Node{a, c}, sparse.ErrDType},
		{"vector", []*gorgonia.Node{a, v}, sparse.ErrShape},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ops.ConcatChannels(tc.xs...)
			require.ErrorIs(t, err, tc.want)
		})
	}
	_, err := ops.ReLU(nil)
	require.ErrorIs(t, err, ops.ErrNilInput)
	s := gorgonia.NewScalar(g, tensor.Float64, gorgonia.WithName("s"))
	_, err = ops.ReLU(s)
	require.ErrorIs(t, err, sparse.ErrShape)
}

// TestWithLossScale checks that the loss gradient (not the loss) is
// multiplied by the scale.
func TestWithLossScale(t *testing.T) {
	_, err := ops.SoftmaxCrossEntropy(nil, nil, ops.WithLossScale(0))
	require.Error(t, err)
	logits := tensor.New(tensor.WithShape(3, 2), tensor.WithBacking([]float64{1, 2, -1, 0.5, 0, 0}))
	labels := []int32{0, 1, ops.IgnoreLabel}
	run := func(opts ...ops.LossOption) (float64, []float64) {
		g := gorgonia.NewGraph()
		z := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithShape(3, 2), gorgonia.WithValue(logits), gorgonia.WithName("z"))
		loss, err := ops.SoftmaxCrossEntropy(z, labels, opts...)
		require.NoError(t, err)
		gs, err := gorgonia.Grad(loss, z)
		require.NoError(t, err)
		vm := gorgonia.NewTapeMachine(g)
		defer vm.Close()
		require.NoError(t, vm.RunAll())
		return loss.Value().Data().(float64), toF64(gs[0].Value().Data())
	}
	l1, g1 := run()
	l8, g8 := run(ops.WithLossScale(8))
	require.Equal(t, l1, l8)
	for i := range g1 {
		require.InDelta(t, 8*g1[i], g8[i], 1e-15)
	}
}

// TestActOpsOnDeviceMatchHost runs ReLU and ConcatChannels (forward and
// gradient) on fake-device tensors and compares with the host.
func TestActOpsOnDeviceMatchHost(t *testing.T) {
	d, err := device.OpenFake()
	require.NoError(t, err)
	defer d.Close()
	rng := rand.New(rand.NewPCG(6, 6))
	mk := func(r, c int) *tensor.Dense {
		v := make([]float32, r*c)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return tensor.New(tensor.WithShape(r, c), tensor.WithBacking(v))
	}
	a, b, w := mk(7, 3), mk(7, 4), mk(7, 7)
	run := func(dev *device.Device) (y []float32, ga, gb []float32) {
		st, err := dev.BeginStep()
		require.NoError(t, err)
		defer st.End()
		g := gorgonia.NewGraph()
		node := func(v *tensor.Dense, name string) *gorgonia.Node {
			dv, err := dev.ToDeviceAs(v, sparse.Float32, device.Inputs)
			require.NoError(t, err)
			return gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(v.Shape()...), gorgonia.WithValue(dv), gorgonia.WithName(name))
		}
		an, bn, wn := node(a, "a"), node(b, "b"), node(w, "w")
		c := gorgonia.Must(ops.ConcatChannels(an, bn))
		r := gorgonia.Must(ops.ReLU(c))
		z := gorgonia.Must(ops.ConcatChannels(r, wn)) // [7, 14]
		labels := []int32{0, 3, 13, 5, 1, ops.IgnoreLabel, 9}
		loss := gorgonia.Must(ops.SoftmaxCrossEntropy(z, labels))
		gs, err := gorgonia.Grad(loss, an, bn)
		require.NoError(t, err)
		vm := gorgonia.NewTapeMachine(g, dev.VMOpt())
		defer vm.Close()
		require.NoError(t, vm.RunAll())
		down := func(v gorgonia.Value) []float32 {
			h, err := dev.ToHost(v, device.Other)
			require.NoError(t, err)
			return append([]float32(nil), h.Data().([]float32)...)
		}
		return down(r.Value()), down(gs[0].Value()), down(gs[1].Value())
	}
	hy, hga, hgb := run(device.Host())
	dy, dga, dgb := run(d)
	require.Equal(t, hy, dy)
	require.InDeltaSlice(t, hga, dga, 1e-7)
	require.InDeltaSlice(t, hgb, dgb, 1e-7)
}

// TestDeviceHostMixErrors checks that host and device operands cannot be
// mixed in one op.
func TestDeviceHostMixErrors(t *testing.T) {
	d, err := device.OpenFake()
	require.NoError(t, err)
	defer d.Close()
	h := tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1, 2, 3, 4}))
	dv, err := d.ToDevice(h)
	require.NoError(t, err)
	g := gorgonia.NewGraph()
	a := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(2, 2), gorgonia.WithValue(dv), gorgonia.WithName("a"))
	b := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(2, 2), gorgonia.WithValue(h), gorgonia.WithName("b"))
	gorgonia.Must(ops.ConcatChannels(a, b))
	vm := gorgonia.NewTapeMachine(g, d.VMOpt())
	defer vm.Close()
	err = vm.RunAll()
	require.Error(t, err)
	require.Contains(t, err.Error(), device.ErrMixed.Error())
	require.False(t, errors.Is(err, nil))
}

// TestVoxelNormOnDeviceMatchesHost compares VoxelNorm and its three
// gradients on a fake device with the host, inside a step (where the
// gradient ops share their statistics) and outside one.
func TestVoxelNormOnDeviceMatchesHost(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	const n, c = 50, 6
	mk := func(k int, off float64) *tensor.Dense {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(off + rng.NormFloat64())
		}
		return tensor.New(tensor.WithShape(k), tensor.WithBacking(v))
	}
	x, gamma, beta, w := mk(n*c, 3), mk(c, 1), mk(c, 0), mk(n*c, 0)
	require.NoError(t, x.Reshape(n, c))
	require.NoError(t, w.Reshape(n, c))
	run := func(d *device.Device, inStep bool) [][]float32 {
		if inStep {
			st, err := d.BeginStep()
			require.NoError(t, err)
			defer st.End()
		}
		g := gorgonia.NewGraph()
		node := func(v *tensor.Dense, name string) *gorgonia.Node {
			dv, err := d.ToDeviceAs(v, sparse.Float32, device.Inputs)
			require.NoError(t, err)
			return gorgonia.NewTensor(g, tensor.Float32, v.Dims(), gorgonia.WithShape(v.Shape()...), gorgonia.WithValue(dv), gorgonia.WithName(name))
		}
		xn, gn, bn, wn := node(x, "x"), node(gamma, "g"), node(beta, "b"), node(w, "w")
		y := gorgonia.Must(ops.VoxelNorm(xn, gn, bn, 1e-5))
		cost := gorgonia.Must(gorgonia.Add(y, wn)) // via the device engine's Add
		loss := gorgonia.Must(ops.SoftmaxCrossEntropy(cost, make([]int32, n)))
		gs, err := gorgonia.Grad(loss, xn, gn, bn)
		require.NoError(t, err)
		vm := gorgonia.NewTapeMachine(g, d.VMOpt())
		defer vm.Close()
		require.NoError(t, vm.RunAll())
		out := make([][]float32, 0, 4)
		for _, v := range []gorgonia.Value{y.Value(), gs[0].Value(), gs[1].Value(), gs[2].Value()} {
			h, err := d.ToHost(v, device.Other)
			require.NoError(t, err)
			out = append(out, append([]float32(nil), h.Data().([]float32)...))
		}
		return out
	}
	want := run(device.Host(), false)
	for _, inStep := range []bool{true, false} {
		d, err := device.OpenFake()
		require.NoError(t, err)
		got := run(d, inStep)
		for i := range want {
			require.InDeltaSlice(t, want[i], got[i], 2e-5, "output %d (in step: %v)", i, inStep)
		}
		require.NoError(t, d.Close())
	}
}
