//go:build cudaext

package cudaext

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// setOccupancyCap sets the engine's EnvOccupancyCap setting, for the
// kernels loaded already as for those loaded later.
func setOccupancyCap(t *testing.T, c occupancyCap) {
	t.Helper()
	require.NoError(t, gpu.d.do(func() error {
		gpu.d.occupancyCap = c
		for name, k := range gpu.d.funcs {
			k.capWarps = c.warpsFor(name)
		}
		return nil
	}))
}

// TestOccupancyCap checks EnvOccupancyCap's padded launches. The driver's
// occupancy calculator (cuOccupancyMaxActiveBlocksPerMultiprocessor) finds
// exactly the capped number of blocks per SM (or the kernel's own, where
// that is fewer) for small kernels of the engine at every cap tried; and a
// kernel map built on the GPU (a shell of 252,392 voxels), a masked
// split-K forward, input gradient and weight gradient give the same bits
// with every kernel but the GEMMs held to one block per SM as without a
// cap.
func TestOccupancyCap(t *testing.T) {
	type check struct {
		name                          string
		threads, warps, smem          int
		want, got, uncapped, maxBlock int
	}
	var checks []check
	require.NoError(t, gpu.d.do(func() error {
		for _, name := range []string{"spconv_pertap_reduce_f16", "spconv_reduce_f32", "masks_union", "kmap_nbr_brick", "sort_onesweep_u32", "sort_cub_pass_u32_b9"} {
			k, err := gpu.d.function(name)
			if err != nil {
				return err
			}
			for _, c := range []struct{ threads, warps int }{{256, 40}, {256, 32}, {256, 16}, {256, 8}, {256, 1}, {128, 24}, {384, 24}, {384, 12}, {512, 16}} {
				if c.threads > k.threads {
					continue
				}
				uncapped, err := funcMaxActiveBlocks(k.fn, c.threads, 0)
				if err != nil {
					return err
				}
				smem := cappedSmem(c.warps, c.threads, 0, k.staticSmem, gpu.d.info.SmemPerSM, gpu.d.info.SmemReserved)
				if err := gpu.d.allowDynamicSmem(name, k, smem); err != nil {
					return err
				}
				got, err := funcMaxActiveBlocks(k.fn, c.threads, smem)
				if err != nil {
					return err
				}
				checks = append(checks, check{name: name, threads: c.threads, warps: c.warps, smem: smem,
					want: min(max(1, c.warps/(c.threads/32)), uncapped), got: got, uncapped: uncapped})
			}
		}
		return nil
	}))
	require.NotEmpty(t, checks)
	for _, c := range checks {
		require.Equalf(t, c.want, c.got, "%s: %d threads capped at %d warps (smem %d; %d blocks uncapped)", c.name, c.threads, c.warps, c.smem, c.uncapped)
	}

	// The same bits with every kernel but the GEMMs at one block per SM.
	coords, ext := synth.SphereShell(256, 1) // brick search, radix sorts of a quarter million keys
	run := func() [3][]float32 {
		dc := gxCoords(t, gpu, coords)
		defer gpu.Free(dc)
		m, err := sparse.SubmanifoldMapOf(dc, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
		require.NoError(t, err)
		defer gpu.ReleaseMap(m)
		const ci, co = 64, 96
		vals := func(n int, seed uint64) []float32 {
			return synth.Uniform[float32](rand.New(rand.NewPCG(seed, 1)), n)
		}
		x := dev(t, m.NIn, ci, vals(m.NIn*ci, 1), sparse.Float16)
		w := dev(t, co, m.V()*ci, vals(co*m.V()*ci, 2), sparse.Float16)
		b := dev(t, 1, co, vals(co, 3), sparse.Float16)
		dy := dev(t, m.NOut, co, vals(m.NOut*co, 4), sparse.Float16)
		defer gpu.Free(x, w, b, dy)
		o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}
		y, err := gpu.Forward(m, x, w, b, o)
		require.NoError(t, err)
		dx, err := gpu.InputGrad(m, dy, w, o)
		require.NoError(t, err)
		dw, err := gpu.WeightGrad(m, x, dy, o)
		require.NoError(t, err)
		defer gpu.Free(y, dx, dw)
		return [3][]float32{host(t, y), host(t, dx), host(t, dw)}
	}
	want := run()
	setOccupancyCap(t, occupancyCap{prefixes: []string{"spconv_", "kmap_", "masks_", "hash_", "sort_", "scan_"}, warps: 1})
	defer setOccupancyCap(t, occupancyCap{})
	capped := 0
	require.NoError(t, gpu.d.do(func() error {
		for _, k := range gpu.d.funcs {
			if k.capWarps > 0 {
				capped++
			}
		}
		return nil
	}))
	require.Greater(t, capped, 5, "kernels loaded by the first run are capped")
	got := run()
	for d := range want {
		requireSameBits(t, want[d], got[d], fmt.Sprintf("direction %d with every non-GEMM kernel at one block per SM", d))
	}
}
