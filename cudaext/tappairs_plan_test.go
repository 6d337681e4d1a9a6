package cudaext

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/stretchr/testify/require"
)

// TestTapPairsSplits checks the tap-pairs split heuristic's bounds: the
// waves' blocks where they fit, at least the slices that keep a block's
// tiles within the kernel's list, at most one slice a tile, partials
// within their cap, and 0 where those bounds cross.
func TestTapPairsSplits(t *testing.T) {
	for _, tc := range []struct {
		name                                                             string
		user                                                             int
		nt, pairs, cols, partElems, sms, waves, partBytes, atLeast, want int64
	}{
		{"waves", 0, 5000, 14, 1, 1000, 132, 4, 1 << 30, 0, 38},
		{"few tiles", 0, 20, 14, 1, 1000, 132, 4, 1 << 30, 0, 20},
		{"list bound", 0, 100000, 14, 1, 1000, 132, 4, 1 << 30, 0, 98},
		{"user", 3, 5000, 14, 1, 1000, 132, 4, 1 << 30, 0, 5},
		{"user within", 7, 5000, 14, 1, 1000, 132, 4, 1 << 30, 0, 7},
		{"user past tiles", 90, 50, 14, 1, 1000, 132, 4, 1 << 30, 0, 50},
		{"partials cap", 0, 5000, 14, 1, 1 << 20, 132, 4, 32 << 20, 0, 8},
		{"bounds cross", 0, 100000, 14, 1, 1 << 20, 132, 4, 16 << 20, 0, 0},
		{"column tiles", 0, 5000, 14, 4, 1000, 132, 4, 1 << 30, 0, 10},
		{"windows", 0, 5000, 14, 1, 1000, 132, 4, 1 << 30, 126, 126},
		{"windows past tiles", 0, 100, 14, 1, 1000, 132, 4, 1 << 30, 126, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tapPairsSplits(tc.user, tc.nt, tc.pairs, tc.cols, tc.partElems, tc.sms, tc.waves, tc.partBytes, tc.atLeast)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestTapPairsMirrorsCpp checks the constants tapPairsSmem mirrors against
// kernels/tappairs_sm90a.cu.
func TestTapPairsMirrorsCpp(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("kernels", "tappairs_sm90a.cu"))
	require.NoError(t, err)
	for _, expr := range []string{
		"constexpr int kTapPairsList = 1024;",
		"static constexpr int R = 8 * C::S;",
		"static constexpr int D = 2 * C::S;",
		"C::S * (kASt + 2 * kBSt) * C::kElem + 3 * R * C::BK * 4 + kTapPairsList * 4 + 16 * C::S + 16 + 1024;",
		"fg::TileCfg<MATH, BM, BN, 64, WM, 1, S, true>, PW>",
		"__launch_bounds__(32 * ((WM) + (PW)), 1)",
		"FG_TAPPAIRS_KERNEL(spconv_tappairs_f16_m128n128k64s4p4, fg::Math::F16, 128, 128, 8, 4, 4)",
		"FG_TAPPAIRS_KERNEL(spconv_tappairs_bf16_m64n64k64s4p4, fg::Math::BF16, 64, 64, 4, 4, 4)",
	} {
		require.Containsf(t, string(src), expr, "tappairs_sm90a.cu changed what tappairs_plan.go mirrors")
	}
	require.Equal(t, 1024, tapPairsList)
	require.Equal(t, 64, tapPairsBK)
	require.Equal(t, 4, tapPairsStages)
	// 128 edge: stages 4·(8 + 16 Ki elements)·2, rings 3·32·64·4, list 4 KiB,
	// barriers 4·16, count 16, alignment 1 KiB.
	require.Equal(t, 196608+24576+4096+64+16+1024, tapPairsSmem(128))
	require.Equal(t, 384, tapPairsThreads(128))
	require.Equal(t, 256, tapPairsThreads(64))
	require.Equal(t, "spconv_tappairs_bf16_m64n64k64s4p4", tapPairsKernel(kernels.BF16, 64))
}
