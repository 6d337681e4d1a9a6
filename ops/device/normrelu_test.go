package device_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
)

// normReLUData returns x [n, c], gamma, beta and dy with about half of
// the normalised values negative.
func normReLUData(n, c int) (x, gamma, beta, dy []float32) {
	rng := rand.New(rand.NewPCG(11, 12))
	f := func(k int, scale, shift float64) []float32 {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(shift + scale*rng.NormFloat64())
		}
		return v
	}
	x = f(n*c, 2, 1)
	for i := range x {
		x[i] += 0.5 * float32(i%c)
	}
	return x, f(c, 0.5, 0.8), f(c, 0.6, 0), f(n*c, 1, 0)
}

// TestFakeNormReLUMatchesPair requires the emulated fused kernels to give
// the bits of NormForward → ReLU and ReLUGrad → NormBackward in every
// activation dtype (the data has no positive value that rounds to zero,
// where the fused mask would pass and ReLU's would not).
func TestFakeNormReLUMatchesPair(t *testing.T) {
	const n, c = 300, 7
	x, gamma, beta, dy := normReLUData(n, c)
	for _, dt := range []sparse.DType{sparse.Float32, sparse.Float16, sparse.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			d := openFake(t)
			up := func(h []float32, rows, cols int, dt sparse.DType) sparse.Matrix {
				m, err := d.Upload(sparse.Matrix{Rows: rows, Cols: cols, Data: h}, dt, device.Other)
				require.NoError(t, err)
				return m
			}
			alloc := func(dt sparse.DType, rows, cols int) sparse.Matrix {
				m, err := d.Alloc(dt, rows, cols)
				require.NoError(t, err)
				return m
			}
			down := func(m sparse.Matrix) []float32 {
				h, err := d.Download(m, device.Other)
				require.NoError(t, err)
				return h.F32()
			}
			xm, dym := up(x, n, c, dt), up(dy, n, c, dt)
			gm, bm := up(gamma, 1, c, sparse.Float32), up(beta, 1, c, sparse.Float32)
			mean, inv := alloc(sparse.Float32, 1, c), alloc(sparse.Float32, 1, c)
			y, yr, fused := alloc(dt, n, c), alloc(dt, n, c), alloc(dt, n, c)
			dym2, dx, dxf := alloc(dt, n, c), alloc(dt, n, c), alloc(dt, n, c)
			var vecs [6]sparse.Matrix
			for i := range vecs {
				vecs[i] = alloc(sparse.Float32, 1, c)
			}
			require.NoError(t, d.Run("norm", func(nn device.NN) error {
				if err := nn.NormStats(mean, inv, xm, 1e-5); err != nil {
					return err
				}
				if err := nn.NormForward(y, xm, gm, bm, mean, inv); err != nil {
					return err
				}
				if err := nn.ReLU(yr, y); err != nil {
					return err
				}
				if err := nn.NormForwardReLU(fused, xm, gm, bm, mean, inv); err != nil {
					return err
				}
				if err := nn.ReLUGrad(dym2, y, dym); err != nil {
					return err
				}
				if err := nn.NormBackward(dx, vecs[0], vecs[1], xm, gm, dym2, mean, inv); err != nil {
					return err
				}
				if err := nn.NormBackwardReLU(dxf, vecs[2], vecs[3], xm, gm, bm, dym, mean, inv); err != nil {
					return err
				}
				return nn.NormBackwardReLU(sparse.Matrix{}, vecs[4], vecs[5], xm, gm, bm, dym, mean, inv)
			}))
			zeros := 0
			for _, v := range down(yr) {
				if v == 0 {
					zeros++
				}
			}
			require.Greater(t, zeros, n*c/5)
			require.Less(t, zeros, n*c*4/5)
			require.Equal(t, down(yr), down(fused), "forward")
			require.Equal(t, down(dx), down(dxf), "dx")
			for k, name := range []string{"dgamma", "dbeta"} {
				require.Equal(t, down(vecs[k]), down(vecs[2+k]), name)
				require.Equal(t, down(vecs[k]), down(vecs[4+k]), name+" without dx")
			}
			err := d.Run("norm", func(nn device.NN) error {
				return nn.NormBackwardReLU(dxf, vecs[2], vecs[3], xm, gm, sparse.Matrix{}, dym, mean, inv)
			})
			require.ErrorIs(t, err, sparse.ErrShape, "the fused backward needs beta")
			err = d.Run("norm", func(nn device.NN) error {
				return nn.NormBackwardReLU(dxf, vecs[2], vecs[3], xm, gm, alloc(sparse.Float32, 1, c+1), dym, mean, inv)
			})
			require.ErrorIs(t, err, sparse.ErrShape)
		})
	}
}

// TestVoxelNormReLUOnFake runs ops.VoxelNorm with ops.WithReLU and the
// unfused pair on a fake device, forward and symbolic gradients, and
// requires the same bits for every activation dtype.
func TestVoxelNormReLUOnFake(t *testing.T) {
	const n, c = 200, 5
	x, gamma, beta, _ := normReLUData(n, c)
	for _, act := range []sparse.DType{sparse.Float32, sparse.Float16, sparse.BFloat16} {
		t.Run(act.String(), func(t *testing.T) {
			run := func(fused bool) [][]float32 {
				d := openFake(t, device.WithActivations(act))
				dev := func(v []float32, shape ...int) gorgonia.Value {
					h := tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float32(nil), v...)))
					dv, err := d.ToDevice(h)
					require.NoError(t, err)
					return dv
				}
				g := gorgonia.NewGraph()
				xn := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(n, c), gorgonia.WithValue(dev(x, n, c)), gorgonia.WithName("x"))
				gn := gorgonia.NewVector(g, tensor.Float32, gorgonia.WithShape(c), gorgonia.WithValue(dev(gamma, c)), gorgonia.WithName("gamma"))
				bn := gorgonia.NewVector(g, tensor.Float32, gorgonia.WithShape(c), gorgonia.WithValue(dev(beta, c)), gorgonia.WithName("beta"))
				var y *gorgonia.Node
				if fused {
					y = gorgonia.Must(ops.VoxelNorm(xn, gn, bn, 1e-5, ops.WithReLU()))
				} else {
					y = gorgonia.Must(ops.ReLU(gorgonia.Must(ops.VoxelNorm(xn, gn, bn, 1e-5))))
				}
				labels := make([]int32, n)
				for i := range labels {
					labels[i] = int32(i % c)
				}
				cost := gorgonia.Must(ops.SoftmaxCrossEntropy(y, labels))
				learn := gorgonia.Nodes{xn, gn, bn}
				grads, err := gorgonia.Grad(cost, learn...)
				require.NoError(t, err)
				vm := gorgonia.NewTapeMachine(g, d.VMOpt())
				defer vm.Close()
				require.NoError(t, vm.RunAll())
				out := [][]float32{download(t, d, y.Value())}
				for _, gn := range grads {
					out = append(out, download(t, d, gn.Value()))
				}
				return out
			}
			want := run(false)
			for k, v := range want {
				require.NotEqual(t, make([]float32, len(v)), v, "output %d is all zero", k)
			}
			require.Equal(t, want, run(true))
		})
	}
}
