//go:build cudaext

package cudaext

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// withTapWGrad runs f with the engine's multi-tap weight-gradient setting
// s, restoring the previous one afterwards.
func withTapWGrad(s tapWGradSetting, f func()) {
	old := gpu.tapWGrad.Load()
	gpu.tapWGrad.Store(&s)
	defer gpu.tapWGrad.Store(old)
	f()
}

// launchedKernels returns the kernel names f launched on the GPU.
func launchedKernels(t *testing.T, f func()) []string {
	t.Helper()
	require.NoError(t, gpu.StartProfile("f"))
	f()
	p, err := gpu.StopProfile()
	require.NoError(t, err)
	var names []string
	for _, ph := range p.Phases {
		for _, k := range ph.Kernels {
			names = append(names, k.Name)
		}
	}
	return names
}

// tapTestOrders are the row orders TestTapWeightGrad runs: the Gray order,
// stored order, and the windowed Gray order with windows of 64 rows (so
// that the test scenes span several windows).
var tapTestOrders = []struct {
	name string
	s    tapWGradSetting
}{
	{"gray", tapWGradSetting{on: true, order: tapOrderGray}},
	{"rows", tapWGradSetting{on: true, order: tapOrderRows}},
	{"win6", tapWGradSetting{on: true, order: tapOrderWindow, windowBits: 6}},
}

// TestTapWeightGrad checks every configuration of the multi-tap weight
// gradient (kernels.TapGrads), in every row order (tapTestOrders), in float16 and bfloat16, against
// the float64 CPU weight gradient of the rounded inputs: the float32
// result within accBound, the narrow one its rounding bit for bit. The
// scenes are the sweep's (submanifold, strided, inverse, transposed,
// 5×5×5 with 125 taps, dilated, empty) and a shell of 3.8 K rows (several
// row splits of many chunks); channel counts up to 64, with partial
// column blocks.
func TestTapWeightGrad(t *testing.T) {
	if !gpu.d.tapGrad || !gpu.d.hopperTiles(kernels.F16) {
		t.Skip("the multi-tap weight-gradient kernels are not loaded (not an sm_90 GPU)")
	}
	rng := rand.New(rand.NewPCG(31, 32))
	scenes := testScenes(t, rng, testing.Short())
	coords, ext := synth.SphereShell(32, 1)
	scenes = append(scenes, scene{"shell32-subm3", mapOK(t)(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))})
	chans := [][2]int{{64, 64}, {32, 64}, {64, 16}, {8, 40}}
	for _, sc := range scenes {
		m := sc.m
		for _, ch := range chans {
			ci, co := ch[0], ch[1]
			xs := synth.Uniform[float32](rng, m.NIn*ci)
			dys := synth.Uniform[float32](rng, m.NOut*co)
			for _, mth := range kernels.TapGradMaths {
				dt := dtypeOf(mth)
				dwR, _ := refWeightGrad(t, m, roundedF64(mth, xs), roundedF64(mth, dys), ci, co)
				x := dev(t, m.NIn, ci, xs, dt)
				dy := dev(t, m.NOut, co, dys, dt)
				for _, c := range kernels.TapGrads {
					for _, ord := range tapTestOrders {
						name := fmt.Sprintf("%s/ci%d-co%d/%v/%v/%s", sc.name, ci, co, mth, c, ord.name)
						o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}
						var dw, dwN sparse.Matrix
						var err, errN error
						st := ord.s
						st.cfg = c
						withTapWGrad(st, func() {
							names := launchedKernels(t, func() {
								dw, err = gpu.WeightGrad(m, x, dy, o)
								on := o
								on.NarrowWeightGrad = true
								dwN, errN = gpu.WeightGrad(m, x, dy, on)
							})
							require.Contains(t, strings.Join(names, " "), c.Name(mth), name)
						})
						require.NoError(t, err, name)
						require.NoError(t, errN, name)
						require.Equal(t, sparse.Float32, storageDType(t, dw), name)
						require.Equal(t, dt, storageDType(t, dwN), name)
						h32, hN := host(t, dw), host(t, dwN)
						gpu.Free(dw, dwN)
						e := relL2(h32, dwR)
						results.add(variantKey{sparse.MaskedImplicitSplitK, "tapgrad32", mth, fmt.Sprintf("%v %s", c, ord.name)}, sc.name, e)
						require.LessOrEqual(t, e, accBound, "%s: float32 result vs the rounded inputs", name)
						for i, v := range h32 {
							if r := roundTo(mth, v); math.Float32bits(r) != math.Float32bits(hN[i]) {
								t.Fatalf("%s: element %d: narrow %g is not the float32 %g rounded (%g)", name, i, hN[i], v, r)
							}
						}
					}
				}
				gpu.Free(x, dy)
			}
		}
	}
}

// TestTapWeightGradRoutes checks which weight-gradient kernel runs: the
// multi-tap kernel by default for ≤ 64 channels in 16 bits, the pairs
// family when it is switched off, for a forced tile, for wider layers,
// for rows that are not 16-byte multiples and for float32; and an impulse
// (one x element, one dy element) lands in exactly one weight element.
func TestTapWeightGradRoutes(t *testing.T) {
	if !gpu.d.tapGrad || !gpu.d.hopperTiles(kernels.F16) {
		t.Skip("the multi-tap weight-gradient kernels are not loaded (not an sm_90 GPU)")
	}
	coords, ext := synth.SphereShell(16, 1)
	m := mapOK(t)(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	rng := rand.New(rand.NewPCG(33, 34))
	run := func(ci, co int, dt sparse.DType, o Options) string {
		x := dev(t, m.NIn, ci, synth.Uniform[float32](rng, m.NIn*ci), dt)
		dy := dev(t, m.NOut, co, synth.Uniform[float32](rng, m.NOut*co), dt)
		defer gpu.Free(x, dy)
		names := launchedKernels(t, func() {
			dw, err := gpu.WeightGrad(m, x, dy, o)
			require.NoError(t, err)
			gpu.Free(dw)
		})
		return strings.Join(names, " ")
	}
	masked := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}
	require.Contains(t, run(64, 64, sparse.Float16, masked), "spconv_tapgrad_f16_"+defaultTapGrad.String())
	require.Contains(t, run(32, 16, sparse.BFloat16, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.Implicit}}), "spconv_tapgrad_bf16_")
	require.NotContains(t, run(64, 128, sparse.Float16, masked), "tapgrad")
	require.NotContains(t, run(12, 64, sparse.Float16, masked), "tapgrad")
	require.NotContains(t, run(64, 64, sparse.Float32, masked), "tapgrad")
	require.NotContains(t, run(64, 64, sparse.Float16, Options{ConvOptions: masked.ConvOptions, Tile: "m64n64k32w2x2s4"}), "tapgrad")
	withTapWGrad(tapWGradSetting{}, func() {
		require.NotContains(t, run(64, 64, sparse.Float16, masked), "tapgrad")
	})

	// Impulse: x[i, c] = 1 and dy[j, n] = 1 where Nbr[j, v] = i give
	// dw[n, v, c] = 1 and zeros elsewhere (every other product has a zero
	// factor), exactly.
	const ci, co = 64, 48
	V := m.V()
	j, v := m.NOut/2, 0
	for v < V && m.Nbr[j*V+v] < 0 {
		v++
	}
	require.Less(t, v, V, "row %d has no neighbour", j)
	i, c, n := int(m.Nbr[j*V+v]), 17, 41
	xs := make([]float32, m.NIn*ci)
	dys := make([]float32, m.NOut*co)
	xs[i*ci+c], dys[j*co+n] = 1, 1
	for _, dt := range []sparse.DType{sparse.Float16, sparse.BFloat16} {
		x, dy := dev(t, m.NIn, ci, xs, dt), dev(t, m.NOut, co, dys, dt)
		dw, err := gpu.WeightGrad(m, x, dy, masked)
		require.NoError(t, err)
		h := host(t, dw)
		gpu.Free(dw, x, dy)
		// Taps whose neighbour of j is also i (none in a submanifold map
		// but v itself) would add more; count what the map says.
		want := make([]float32, co*V*ci)
		for u := 0; u < V; u++ {
			if int(m.Nbr[j*V+u]) == i {
				want[n*V*ci+u*ci+c] = 1
			}
		}
		require.Equal(t, want, h, "%v impulse", dt)
	}
}
