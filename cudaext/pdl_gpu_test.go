//go:build cudaext

package cudaext

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// TestProgrammaticLaunch checks the launches with programmatic stream
// serialization (Device.pdl, pdl.cuh): a chain of dependent layers queued
// back to back without a host wait — forwards, each reading the one
// before, then input gradients down the chain and a weight gradient with
// bias per layer — gives the same bits with and without, for every
// algorithm, f16, bf16 and tf32, on a shell whose gathers are one wave of
// split blocks (summed in the kernel or by the reduction kernel) and on a
// random scene of two batches; with the switch on the launches are
// counted as programmatic, with it off none is. A kernel that read its predecessor's
// output before that kernel had finished would show here as different
// bits (or a failure of the float64 check of the first layer).
func TestProgrammaticLaunch(t *testing.T) {
	var on, syncEach bool
	require.NoError(t, gpu.d.do(func() error {
		// Launches queue back to back here even under FLEXGEMM_CUDA_SYNC
		// (the suite's setting), or nothing could overlap.
		on, syncEach, gpu.d.syncEach = gpu.d.pdl, gpu.d.syncEach, false
		return nil
	}))
	defer gpu.d.do(func() error { gpu.d.syncEach = syncEach; return nil })
	if !on {
		t.Skipf("no programmatic launches on %s (compute capability %d.%d, or %s=0)", gpu.d.info.Name, gpu.d.info.Major, gpu.d.info.Minor, EnvProgrammaticLaunch)
	}
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(47, 1))
	rext := grid.Extent{Batch: 2, X: 14, Y: 12, Z: 10}
	scenes := []scene{
		{"shell8-subm3", shell8Map(t)},
		{"random-subm3", ok(kmap.NewSubmanifold(synth.RandomScene(rng, rext, 0.3), rext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))},
	}
	setPDL := func(v bool) (launches int) {
		require.NoError(t, gpu.d.do(func() error { gpu.d.pdl = v; launches = gpu.d.pdlLaunches; return nil }))
		return launches
	}
	defer setPDL(true)
	const layers, c = 6, 128
	for _, sc := range scenes {
		m := sc.m
		V := m.V()
		ref := cpuReference(t, rng, m, c, c)
		for _, mth := range []kernels.Math{kernels.F16, kernels.BF16, kernels.TF32} {
			gpu.SetTF32(mth == kernels.TF32)
			dt := dtypeOf(mth)
			x0, w0, b0, dy0 := ref.operands(t, m, dt)
			// Later layers: weights scaled so that the chain stays near 1.
			ws := []sparse.Matrix{w0}
			bs := []sparse.Matrix{b0}
			scale := float32(1 / math.Sqrt(float64(V*c)))
			for l := 1; l < layers; l++ {
				w := synth.Uniform[float32](rng, c*V*c)
				for i := range w {
					w[i] *= scale
				}
				ws = append(ws, dev(t, c, V*c, w, dt))
				bs = append(bs, dev(t, 1, c, synth.Uniform[float32](rng, c), dt))
			}
			for _, alg := range sparse.Algorithms {
				name := fmt.Sprintf("%s/%v/%v", sc.name, mth, alg)
				o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}}
				// run queues the chain and downloads every result at the end.
				run := func() [][]float32 {
					xs := []sparse.Matrix{x0}
					for l := 0; l < layers; l++ {
						y, err := gpu.Forward(m, xs[l], ws[l], bs[l], o)
						require.NoError(t, err, name)
						xs = append(xs, y)
					}
					outs := []sparse.Matrix{xs[layers]}
					dy := dy0
					for l := layers - 1; l >= 0; l-- {
						dw, db, err := gpu.ParamGrads(m, xs[l], dy, o)
						require.NoError(t, err, name)
						dx, err := gpu.InputGrad(m, dy, ws[l], o)
						require.NoError(t, err, name)
						outs = append(outs, dw, db, dx)
						dy = dx
					}
					first, err := gpu.Forward(m, x0, w0, b0, o)
					require.NoError(t, err, name)
					outs = append(outs, first)
					res := make([][]float32, len(outs))
					for i, r := range outs {
						res[i] = host(t, r)
					}
					gpu.Free(outs...)
					gpu.Free(xs[1:layers]...)
					return res
				}
				before := setPDL(false)
				want := run()
				require.Equal(t, before, setPDL(true), "%s: switched off, no launch is programmatic", name)
				got := run()
				require.Greater(t, setPDL(true), before, "%s: switched on, launches are programmatic", name)
				require.Len(t, got, len(want))
				for i := range want {
					requireSameBits(t, want[i], got[i], fmt.Sprintf("%s: result %d, programmatic against plain launches", name, i))
				}
				e := relL2(got[len(got)-1], ref.y)
				require.LessOrEqual(t, e, bound(mth), "%s: first layer's forward: error %g against float64", name, e)
			}
			gpu.Free(ws...)
			gpu.Free(bs[1:]...)
			gpu.Free(x0, b0, dy0)
		}
		gpu.SetTF32(false)
		gpu.ReleaseMap(m)
	}
}
