//go:build cudaext

package cudaext

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// TestWSPairs checks the warp-specialised pairs kernels (EnvWSPairs,
// kernels.PairsWSName, pairs_ws.cuh) against the plain ones: the same
// products in the same order, so the weight gradient (and the bias
// gradient summed beside it) must be the plain kernel's bit for bit — on
// the small submanifold shell and the strided and transposed maps of the
// split tests, in both 16-bit arithmetics, on the 128×128 Hopper tile over
// whole and partial tiles of rows and columns, unsplit and with the window
// split (its thresholds lowered), with the partials and with the ordered
// splits, float32 and narrow results — and within the arithmetic's bound
// of the float64 reference; the twin must run exactly where the operand
// rows are 16 bytes, and leave the others to the plain kernel.
func TestWSPairs(t *testing.T) {
	skipWithoutHopper(t)
	rng := rand.New(rand.NewPCG(71, 145))
	maps := splitTestMaps(t, rng, 16, grid.Extent{Batch: 1, X: 20, Y: 18, Z: 22}, 0.08)
	setWindow := func(minBytes, rows int64) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.pairsWindowMin, gpu.d.pairsWindowRows = minBytes, rows
			return nil
		}))
	}
	defer setWindow(pairsWindowMinBytes, pairsWindowRows)
	setWS := deviceSwitch(t, func(d *Device) *bool { return &d.wsPairs })
	setOrdered := deviceSwitch(t, func(d *Device) *bool { return &d.orderedPairs })
	deviceSwitch(t, func(d *Device) *bool { return &d.poisonPartials })(true)
	launches := deviceCounter(t, func(d *Device) int { return d.wsPairsLaunches })
	const tile = "m128n128k64w8x1s6h"
	cases := []struct {
		ci, co int
		vec    bool // 16-byte rows of both operands: the twin runs
	}{
		{128, 128, true},
		{136, 200, true}, // partial tiles of columns (Ci) and rows (Co)
		{256, 128, true},
		{100, 128, false}, // x rows of 200 bytes
	}
	ran := 0
	for _, sc := range maps {
		m := sc.m
		for _, c := range cases {
			xs := synth.Uniform[float32](rng, m.NIn*c.ci)
			dys := synth.Uniform[float32](rng, m.NOut*c.co)
			for _, mth := range []kernels.Math{kernels.F16, kernels.BF16} {
				dt := dtypeOf(mth)
				want, wantB := refWeightGrad(t, m, roundedF64(mth, xs), roundedF64(mth, dys), c.ci, c.co)
				x, dy := dev(t, m.NIn, c.ci, xs, dt), dev(t, m.NOut, c.co, dys, dt)
				for _, split := range []struct {
					alg  sparse.Algorithm
					rows int64 // window rows (0: the default thresholds)
				}{{sparse.MaskedImplicit, 0}, {sparse.MaskedImplicitSplitK, 64}, {sparse.MaskedImplicitSplitK, 1000}} {
					if split.rows > 0 {
						setWindow(0, split.rows)
					} else {
						setWindow(pairsWindowMinBytes, pairsWindowRows)
					}
					for _, ordered := range []bool{false, true} {
						setOrdered(ordered)
						for _, narrow := range []bool{false, true} {
							name := fmt.Sprintf("%s/ci%d-co%d/%v/%v-window%d/ordered%v/narrow%v", sc.name, c.ci, c.co, mth, split.alg, split.rows, ordered, narrow)
							o := Options{ConvOptions: sparse.ConvOptions{Algorithm: split.alg, NarrowWeightGrad: narrow}, Tile: tile}
							run := func(ws bool) ([]float32, []float32) {
								setWS(ws)
								before := launches()
								dw, db, err := gpu.ParamGrads(m, x, dy, o)
								require.NoError(t, err, name)
								runs := 0
								if ws && c.vec {
									runs = 1
								}
								require.Equal(t, runs, launches()-before, "%s: twin launches, ws %v", name, ws)
								w, b := host(t, dw), host(t, db)
								gpu.Free(dw, db)
								return w, b
							}
							plainW, plainB := run(false)
							gotW, gotB := run(true)
							require.Equal(t, plainW, gotW, "%s: weight gradient, twin against the plain kernel", name)
							require.Equal(t, plainB, gotB, "%s: bias gradient beside it", name)
							lim := accBound
							if narrow {
								lim = bound(mth)
							}
							require.LessOrEqual(t, relL2(gotW, want), lim, name)
							require.LessOrEqual(t, relL2(gotB, wantB), lim, name)
							if c.vec {
								ran++
							}
						}
					}
				}
				gpu.Free(x, dy)
			}
		}
	}
	require.Greater(t, ran, 0, "no case ran the twin")
}
