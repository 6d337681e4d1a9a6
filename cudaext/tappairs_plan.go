package cudaext

// The tap-pairs weight gradient's launch plan (tappairs.go): its kernels,
// their shared memory and the split heuristic. No build tag, so the tests
// of the heuristic run without a GPU.

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
)

const (
	// tapPairsModule is the module of the kernels.
	tapPairsModule = "tappairs_sm90a"
	// tapPairsBK, tapPairsStages: the kernels' rows a stage and stages
	// (fg::TileCfg BK, S).
	tapPairsBK, tapPairsStages = 64, 4
	// tapPairsProducers is the kernels' producer warps.
	tapPairsProducers = 4
	// tapPairsList is fg::kTapPairsList: the most row tiles one block's
	// split may span.
	tapPairsList = 1024
	// tapPairsWaves is the heuristic's blocks per SM (one block fits an
	// SM at the 128 edge, two at 64): the splits of the pairs whose tiles
	// hold fewer of their taps end early, and the later waves fill in.
	tapPairsWaves = 4
	// tapPairsPartBytes caps the float32 partials.
	tapPairsPartBytes = 256 << 20
)

// tapPairsEdge returns the kernel's tile edge (its BM = BN) for a weight
// gradient of co output and ci input channels: 128 where both are
// multiples of 128, 64 where both are of 64, else 0 (no kernel).
func tapPairsEdge(co, ci int64) int64 {
	switch {
	case co%128 == 0 && ci%128 == 0:
		return 128
	case co%64 == 0 && ci%64 == 0:
		return 64
	}
	return 0
}

// tapPairsSmem mirrors fg::TapPairsCfg::kSmem for the tile edge: the
// stages (dy and two taps of x, 16-bit), three index rings of 8·S slots,
// the tile list, the stages' full and empty barriers, the list's count,
// and the 1 KiB alignment of the stages.
func tapPairsSmem(edge int64) int {
	const bk, s = tapPairsBK, tapPairsStages
	return int(s*(bk*edge+2*bk*edge)*2 + 3*8*s*bk*4 + tapPairsList*4 + 16*s + 16 + 1024)
}

// tapPairsThreads is the kernel's block for the tile edge: a consumer
// warpgroup per 64 rows of dy's columns and tapPairsProducers warps.
func tapPairsThreads(edge int64) int { return int(edge/64*128 + 32*tapPairsProducers) }

// tapPairsKernel is the kernel of arithmetic m and tile edge.
func tapPairsKernel(m kernels.Math, edge int64) string {
	return fmt.Sprintf("spconv_tappairs_%v_m%dn%dk%ds%dp%d", m, edge, edge, tapPairsBK, tapPairsStages, tapPairsProducers)
}

// tapPairsSplits returns the split slices per pair of taps: blocks for
// waves per SM over pairs·cols (pair, column tile) slices, or atLeast
// where that is more (the weight gradient's row windows, which keep the
// blocks resident at a time on the rows of a few windows: L2 locality,
// windowPairsSplits); at least the slices that keep each under
// tapPairsList of the nt row tiles and at most nt, and float32 partials
// (partElems per slice) within partBytes; 0 when those bounds cross (the
// pairs kernels then run). user > 0 is taken as it is, within the same
// bounds.
func tapPairsSplits(user int, nt, pairs, cols, partElems, sms, waves, partBytes, atLeast int64) int64 {
	least := max((nt+tapPairsList-1)/tapPairsList, 1)
	most := min(max(nt, 1), partBytes/max(4*partElems, 1))
	per := max(pairs*cols, 1)
	s := max((waves*sms+per-1)/per, atLeast)
	if user > 0 {
		s = int64(user)
	}
	s = min(max(s, least), most)
	if s < least || s > 65535 {
		return 0
	}
	return s
}
