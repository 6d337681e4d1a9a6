//go:build cudaext

package cudaext

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// TestProfilePhases profiles a GPU map build and one training step of one
// layer and checks the breakdown: one entry per phase in order, every
// launch attributed to its phase, kernel time within the spans.
func TestProfilePhases(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	coords, ext := synth.SphereShell(16, 1)
	dc := dev32(t, coords)
	defer gpu.Free(dc)
	ci, co := 32, 32
	_, err := gpu.StopProfile()
	require.True(t, errors.Is(err, ErrProfile), "stop without start: %v", err)

	require.NoError(t, gpu.StartProfile("map"))
	require.True(t, gpu.Profiling())
	require.True(t, errors.Is(gpu.StartProfile("again"), ErrProfile))
	m, err := gpu.SubmanifoldMap(dc, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	defer gpu.ReleaseMap(m)
	V := m.V()
	x := dev(t, m.NIn, ci, synth.Uniform[float32](rng, m.NIn*ci), sparse.Float16)
	w := dev(t, co, V*ci, synth.Uniform[float32](rng, co*V*ci), sparse.Float16)
	dy := dev(t, m.NOut, co, synth.Uniform[float32](rng, m.NOut*co), sparse.Float16)
	defer gpu.Free(x, w, dy)
	require.NoError(t, gpu.Phase("derive"))
	require.NoError(t, gpu.DeriveTables(m, TablesAll, tileHeights()...))
	o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}
	require.NoError(t, gpu.Phase("fwd"))
	y, err := gpu.Forward(m, x, w, sparse.Matrix{}, o)
	require.NoError(t, err)
	require.NoError(t, gpu.Phase("wgrad"))
	dw, err := gpu.WeightGrad(m, x, dy, o)
	require.NoError(t, err)
	require.NoError(t, gpu.Phase("dgrad"))
	dx, err := gpu.InputGrad(m, dy, w, o)
	require.NoError(t, err)
	gpu.Free(y, dw, dx)
	p, err := gpu.StopProfile()
	require.NoError(t, err)
	require.False(t, gpu.Profiling())

	names := make([]string, len(p.Phases))
	for i, ph := range p.Phases {
		names[i] = ph.Name
	}
	require.Equal(t, []string{"map", "derive", "fwd", "wgrad", "dgrad"}, names)
	var sum float64
	for _, ph := range p.Phases {
		require.NotEmpty(t, ph.Kernels, "phase %s launched kernels", ph.Name)
		require.Greater(t, ph.KernelMs, 0.0, ph.Name)
		require.LessOrEqual(t, ph.KernelMs, ph.SpanMs*1.001+1e-3, "phase %s: kernels within the span", ph.Name)
		require.GreaterOrEqual(t, ph.HostMs, 0.0)
		var k float64
		for _, kt := range ph.Kernels {
			require.Positive(t, kt.Launches)
			k += kt.Ms
		}
		require.InDelta(t, ph.KernelMs, k, 1e-6)
		sum += ph.KernelMs
	}
	require.InDelta(t, p.KernelMs, sum, 1e-6)
	require.LessOrEqual(t, p.KernelMs, p.TotalMs*1.001+1e-3)
	has := func(phase, prefix string) bool {
		for _, ph := range p.Phases {
			if ph.Name != phase {
				continue
			}
			for _, k := range ph.Kernels {
				if strings.HasPrefix(k.Name, prefix) {
					return true
				}
			}
		}
		return false
	}
	require.True(t, has("map", "kmap_nbr_")) // kmap_nbr_sub for submanifold maps
	require.True(t, has("fwd", "spconv_gather_f16_"))
	require.True(t, has("wgrad", "spconv_pairs_f16_"))
	// The input gradient reads the weight transposed inside the gather
	// kernel (its _wt variant, MN-major on a Hopper tile): no separate
	// transpose launch.
	require.False(t, has("dgrad", "spconv_transpose_w"), "dgrad launched a weight transpose")
	require.True(t, has("dgrad", "spconv_gather_f16_"))

	// Without a profile, Phase is a no-op.
	require.NoError(t, gpu.Phase("ignored"))
}

// dev32 uploads int32 coordinates [N, 4].
func dev32(t *testing.T, c []int32) sparse.Matrix {
	t.Helper()
	m, err := gpu.ToDevice(sparse.Matrix{Rows: len(c) / 4, Cols: 4, Data: c})
	require.NoError(t, err)
	return m
}
