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
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// TestSideStreamBackward runs the backward pass of a stack of layers as
// the bench issues it — each layer's weight gradient
// and bias gradient (on the side stream), then its input gradient (beside
// them), then the free of the layer's input, which its weight gradient may
// still be reading and later work could reuse — with the side stream and without it
// (EnvNoSideStream), without FLEXGEMM_CUDA_SYNC's waits, three times
// each: every weight, bias and input gradient equals the all-main-stream
// one bit for bit (a block reused too early would show), the first layer's
// weight gradient matches the float64 reference, the side stream took two
// sections per layer, and once the pass is done and its results freed no
// block stays held or in use; and that calls over more than side.maxRows
// rows stay on the main stream.
func TestSideStreamBackward(t *testing.T) {
	ok := mapOK(t)
	coords, ext := synth.SphereShell(48, 1)
	m := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	const L, c = 3, 64
	V := m.V()
	rng := rand.New(rand.NewPCG(181, 182))
	set := func(sideOff, syncEach bool) {
		require.NoError(t, gpu.d.do(func() error { gpu.d.side.off, gpu.d.syncEach = sideOff, syncEach; return nil }))
	}
	setMaxRows := func(n int64) { require.NoError(t, gpu.d.do(func() error { gpu.d.side.maxRows = n; return nil })) }
	defer setMaxRows(sideMaxRows)
	setMaxRows(int64(m.NOut)) // the map's calls go to the side stream whatever its size
	sections := func() (n int) {
		require.NoError(t, gpu.d.do(func() error { n = gpu.d.side.sections; return nil }))
		return n
	}
	defer set(false, gpu.d.syncEach)
	for _, mth := range []kernels.Math{kernels.F16, kernels.F32} {
		dt := dtypeOf(mth)
		acts := make([][]float32, L)
		ws := make([]sparse.Matrix, L)
		for l := range L {
			acts[l] = synth.Uniform[float32](rng, m.NIn*c)
			ws[l] = dev(t, c, V*c, synth.Uniform[float32](rng, c*V*c), dt)
		}
		dyTop := synth.Uniform[float32](rng, m.NOut*c)
		for _, alg := range []sparse.Algorithm{sparse.MaskedImplicitSplitK, sparse.Explicit} {
			o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}}
			// backward returns each layer's weight and bias gradient and
			// the input gradient of every layer above 0, downloaded.
			backward := func() (dws, dbs, dxs [][]float32) {
				x := make([]sparse.Matrix, L)
				for l := range L {
					x[l] = dev(t, m.NIn, c, acts[l], dt)
				}
				top := dev(t, m.NOut, c, dyTop, dt)
				dy := top
				var w, b, d []sparse.Matrix
				for l := L - 1; l >= 0; l-- {
					dw, err := gpu.WeightGrad(m, x[l], dy, o)
					require.NoError(t, err)
					db, err := gpu.BiasGrad(dy)
					require.NoError(t, err)
					w, b = append(w, dw), append(b, db)
					if l > 0 {
						// The layer's input is freed while its weight
						// gradient may still read it on the side stream.
						dx, err := gpu.InputGrad(m, dy, ws[l], o)
						require.NoError(t, err)
						gpu.Free(x[l])
						d, dy = append(d, dx), dx
					}
				}
				gpu.Free(x[0], top)
				for _, r := range w {
					dws = append(dws, host(t, r))
				}
				for _, r := range b {
					dbs = append(dbs, host(t, r))
				}
				for _, r := range d {
					dxs = append(dxs, host(t, r))
				}
				gpu.Free(w...)
				gpu.Free(b...)
				gpu.Free(d...)
				return dws, dbs, dxs
			}
			set(true, false)
			before := sections()
			wantW, wantB, wantX := backward()
			require.Equal(t, before, sections(), "sections queued with the side stream off")
			inUse := gpu.MemStats().InUse
			set(false, false)
			for rep := range 3 {
				name := fmt.Sprintf("%v/%v/rep%d", mth, alg, rep)
				before := sections()
				dws, dbs, dxs := backward()
				require.Equal(t, before+2*L, sections(), "%s: side sections", name)
				for _, p := range []struct {
					what      string
					got, want [][]float32
				}{{"weight gradient", dws, wantW}, {"bias gradient", dbs, wantB}, {"input gradient", dxs, wantX}} {
					require.Equal(t, len(p.want), len(p.got), "%s: %s count", name, p.what)
					for i := range p.want {
						require.Equal(t, len(p.want[i]), len(p.got[i]))
						for j := range p.want[i] {
							if math.Float32bits(p.got[i][j]) != math.Float32bits(p.want[i][j]) {
								require.Failf(t, "side stream changed a result", "%s: %s %d element %d: %v, without the side stream %v",
									name, p.what, i, j, p.got[i][j], p.want[i][j])
							}
						}
					}
				}
				require.Equal(t, inUse, gpu.MemStats().InUse, "%s: blocks left in use or held", name)
				var held int64
				require.NoError(t, gpu.d.do(func() error { held = gpu.d.side.ledger.heldBytes(); return nil }))
				require.Zero(t, held, "%s: blocks still held after a join", name)
			}
			// The top layer's weight gradient against the float64 reference.
			ref, _ := refWeightGrad(t, m, roundedF64(mth, acts[L-1]), roundedF64(mth, dyTop), c, c)
			lim := accBound
			if dt == sparse.Float32 {
				lim = bound(mth)
			}
			require.LessOrEqual(t, relL2(wantW[0], ref), lim, "%v/%v: top weight gradient", mth, alg)
		}
		gpu.Free(ws...)
	}
	// Above side.maxRows rows, weight and bias gradients stay on the main
	// stream.
	setMaxRows(int64(m.NOut) - 1)
	x := dev(t, m.NIn, c, synth.Uniform[float32](rng, m.NIn*c), sparse.Float32)
	dy := dev(t, m.NOut, c, synth.Uniform[float32](rng, m.NOut*c), sparse.Float32)
	before := sections()
	dw, err := gpu.WeightGrad(m, x, dy, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}})
	require.NoError(t, err)
	db, err := gpu.BiasGrad(dy)
	require.NoError(t, err)
	require.Equal(t, before, sections(), "sections queued for %d rows, above side.maxRows", m.NOut)
	gpu.Free(x, dy, dw, db)
}

// BenchmarkSideStreamOverlap times one layer's backward calls — weight
// gradient, bias gradient, input gradient, as the bench issues them — on
// sphere-shell maps, with the side stream (side) and without (main), by
// CUDA events recorded on the stream each call ran on: wgrad-end-ms is
// when the weight and bias gradients were done and dgrad-end-ms when the
// input gradient was, both from an event on the main stream before the
// first call. With the side stream, an input gradient that starts on the
// SMs the weight gradient leaves idle ends before the sum of the two
// main-stream times; one that slows the weight gradient shows as a later
// wgrad-end-ms. fp16, masked implicit GEMM split-K, the engine's
// heuristics; the side stream taken whatever the map's size.
func BenchmarkSideStreamOverlap(b *testing.B) {
	ok := mapOK(b)
	poison := gpu.poison.Swap(false)
	defer gpu.poison.Store(poison)
	o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}
	for _, cfg := range []struct{ res, c int }{{16, 1024}, {64, 1024}, {256, 256}} {
		coords, ext := synth.SphereShell(cfg.res, 1)
		m := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
		x, w, dy := benchInputs(b, m, cfg.c, kernels.F16)
		for _, mode := range []string{"main", "side"} {
			b.Run(fmt.Sprintf("res%d-c%d/%s", cfg.res, cfg.c, mode), func(b *testing.B) {
				// side: every call of the map on the side stream, whatever
				// its size (side.maxRows).
				require.NoError(b, gpu.d.do(func() error {
					gpu.d.side.off, gpu.d.side.maxRows = mode == "main", math.MaxInt64
					return nil
				}))
				defer func() {
					_ = gpu.d.do(func() error { gpu.d.side.off, gpu.d.side.maxRows = false, sideMaxRows; return nil })
				}()
				var ev [3]cuEvent
				require.NoError(b, gpu.d.do(func() error {
					for i := range ev {
						var err error
						if ev[i], err = eventCreate(); err != nil {
							return err
						}
					}
					return nil
				}))
				defer func() {
					_ = gpu.d.do(func() error {
						for _, e := range ev {
							_ = eventDestroy(e)
						}
						return nil
					})
				}()
				// record queues event i on stream s without joining the
				// side stream (do would make the main stream wait for it).
				record := func(i int, side bool) {
					require.NoError(b, gpu.d.doJoining(func() error {
						s := gpu.d.mainStream
						if side && mode == "side" {
							s = gpu.d.side.stream
						}
						return eventRecord(ev[i], s)
					}, func() error { return nil }))
				}
				step := func() {
					record(0, false)
					dw, err := gpu.WeightGrad(m, x, dy, o)
					require.NoError(b, err)
					db, err := gpu.BiasGrad(dy)
					require.NoError(b, err)
					record(1, true)
					dx, err := gpu.InputGrad(m, dy, w, o)
					require.NoError(b, err)
					record(2, false)
					gpu.Free(dw, db, dx)
				}
				step() // warm-up
				var wEnd, dEnd float64
				for b.Loop() {
					step()
					require.NoError(b, gpu.d.do(func() error {
						if err := eventSync(ev[1]); err != nil {
							return err
						}
						if err := eventSync(ev[2]); err != nil {
							return err
						}
						t1, err := eventElapsed(ev[0], ev[1])
						if err != nil {
							return err
						}
						t2, err := eventElapsed(ev[0], ev[2])
						wEnd += float64(t1)
						dEnd += float64(t2)
						return err
					}))
				}
				b.ReportMetric(wEnd/float64(b.N), "wgrad-end-ms")
				b.ReportMetric(dEnd/float64(b.N), "dgrad-end-ms")
			})
		}
		gpu.Free(x, w, dy)
	}
}
