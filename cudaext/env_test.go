package cudaext

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// TestBrickMinRowsFromEnv checks the parsing of EnvBrickMinRows.
func TestBrickMinRowsFromEnv(t *testing.T) {
	checkEnvParse(t, EnvBrickMinRows, brickMinRowsFromEnv, []envCase[int]{
		{set: false, want: brickMinRows},
		{value: "", set: true, want: brickMinRows},
		{value: "0", set: true, want: 0},
		{value: "262144", set: true, want: 262144},
		{value: "-1", set: true, bad: true},
		{value: "1e6", set: true, bad: true},
	})
}

// TestTilesPerSMFromEnv checks the parsing of EnvLongestFirstTilesPerSM,
// EnvLongestFirstTilesPerSMTF32 and EnvStreamKTilesPerSM.
func TestTilesPerSMFromEnv(t *testing.T) {
	for _, c := range []struct {
		key   string
		parse func() (int, error)
		def   int
	}{
		{EnvLongestFirstTilesPerSM, longestFirstTilesPerSMFromEnv, longestFirstTilesPerSM},
		{EnvLongestFirstTilesPerSMTF32, longestFirstTilesPerSMTF32FromEnv, longestFirstTilesPerSMTF32},
		{EnvStreamKTilesPerSM, streamKTilesPerSMFromEnv, streamKTilesPerSM},
	} {
		t.Run(c.key, func(t *testing.T) {
			checkEnvParse(t, c.key, c.parse, []envCase[int]{
				{set: false, want: c.def},
				{value: "", set: true, want: c.def},
				{value: "0", set: true, want: 0},
				{value: "1000", set: true, want: 1000},
				{value: "-3", set: true, bad: true},
				{value: "many", set: true, bad: true},
			})
		})
	}
}

// TestRegroupThreadsFromEnv checks the parsing of EnvRegroupThreads.
func TestRegroupThreadsFromEnv(t *testing.T) {
	checkEnvParse(t, EnvRegroupThreads, regroupThreadsFromEnv, []envCase[int]{
		{set: false, want: regroupThreads},
		{value: "", set: true, want: regroupThreads},
		{value: "256", set: true, want: 256},
		{value: "512", set: true, want: 512},
		{value: "1024", set: true, want: 1024},
		{value: "128", set: true, bad: true},
		{value: "2048", set: true, bad: true},
		{value: "wide", set: true, bad: true},
	})
}

// TestRegroupMaxRowsFromEnv checks the parsing of EnvRegroupMaxRows.
func TestRegroupMaxRowsFromEnv(t *testing.T) {
	checkEnvParse(t, EnvRegroupMaxRows, regroupMaxRowsFromEnv, []envCase[int]{
		{set: false, want: kmap.RegroupMaxRows},
		{value: "", set: true, want: kmap.RegroupMaxRows},
		{value: "262144", set: true, want: 262144},
		{value: "0", set: true, want: 0},
		{value: "-1", set: true, bad: true},
		{value: "2^18", set: true, bad: true},
	})
}

// TestRunSortMaxKeysFromEnv checks the parsing of EnvRunSortMaxKeys.
func TestRunSortMaxKeysFromEnv(t *testing.T) {
	checkEnvParse(t, EnvRunSortMaxKeys, runSortMaxKeysFromEnv, []envCase[int]{
		{set: false, want: runSortLimit},
		{value: "", set: true, want: runSortLimit},
		{value: "0", set: true, want: 0},
		{value: "16384", set: true, want: 16384},
		{value: "65537", set: true, bad: true},
		{value: "-1", set: true, bad: true},
		{value: "all", set: true, bad: true},
	})
}

// TestPairsWindowRowsFromEnv checks the parsing of EnvPairsWindowRows.
func TestPairsWindowRowsFromEnv(t *testing.T) {
	checkEnvParse(t, EnvPairsWindowRows, pairsWindowRowsFromEnv, []envCase[int64]{
		{set: false, want: pairsWindowRows},
		{value: "", set: true, want: pairsWindowRows},
		{value: "4096", set: true, want: 4096},
		{value: "0", set: true, bad: true},
		{value: "-3", set: true, bad: true},
		{value: "many", set: true, bad: true},
	})
}

// TestSwitchesFromEnv checks the parsing of the on/off switches
// (switchFromEnv): the default when unset or empty, "1" and "0", and an
// error for any other value; those Open reads, through openSwitches.
func TestSwitchesFromEnv(t *testing.T) {
	fromOpen := func(key string) func() (bool, error) {
		i := slices.IndexFunc(openSwitches, func(sw openSwitch) bool { return sw.env == key })
		require.GreaterOrEqual(t, i, 0, "%s is not in openSwitches", key)
		return func() (bool, error) { return switchFromEnv(key, openSwitches[i].def) }
	}
	require.Len(t, openSwitches, 13)
	for _, c := range []struct {
		key   string
		parse func() (bool, error)
		def   bool
	}{
		{EnvSpecializedGathers, fromOpen(EnvSpecializedGathers), true},
		{EnvPersistentGathers, fromOpen(EnvPersistentGathers), persistentGathersDefault},
		{EnvNarrowPersistent, fromOpen(EnvNarrowPersistent), narrowPersistentDefault},
		{EnvTallGathers, fromOpen(EnvTallGathers), tallGathersDefault},
		{EnvTallDeep, fromOpen(EnvTallDeep), tallDeepDefault},
		{EnvTallMany, fromOpen(EnvTallMany), tallManyDefault},
		{EnvSwappedWide, fromOpen(EnvSwappedWide), swappedWideDefault},
		{EnvSwappedWide16, fromOpen(EnvSwappedWide16), swappedWide16Default},
		{EnvSwappedWT, fromOpen(EnvSwappedWT), swappedWTDefault},
		{EnvSharedIndex, fromOpen(EnvSharedIndex), sharedIndexDefault},
		{EnvTF32Narrow, fromOpen(EnvTF32Narrow), tf32NarrowDefault},
		{EnvFusedSplitReduce, fromOpen(EnvFusedSplitReduce), fusedSplitReduceDefault},
		{EnvProgrammaticLaunch, programmaticLaunchFromEnv, programmaticLaunchDefault},
		{EnvTF32Clear, fromOpen(EnvTF32Clear), tf32ClearDefault},
		{EnvOrderedSplits, orderedSplitsFromEnv, orderedSplitsDefault},
	} {
		t.Run(c.key, func(t *testing.T) {
			cases := []envCase[bool]{
				{set: false, want: c.def},
				{value: "", set: true, want: c.def},
				{value: "1", set: true, want: true},
				{value: "0", set: true, want: false},
			}
			for _, bad := range []string{"yes", "2", "3", "on", "true"} {
				cases = append(cases, envCase[bool]{value: bad, set: true, bad: true})
			}
			checkEnvParse(t, c.key, c.parse, cases)
		})
	}
}

// TestPerTapMaxBytesFromEnv checks the parsing of EnvPerTapMaxMB.
func TestPerTapMaxBytesFromEnv(t *testing.T) {
	checkEnvParse(t, EnvPerTapMaxMB, perTapMaxBytesFromEnv, []envCase[int64]{
		{set: false, want: perTapMaxMBDefault << 20},
		{value: "", set: true, want: perTapMaxMBDefault << 20},
		{value: "0", set: true, want: 0},
		{value: "100", set: true, want: 100 << 20},
		{value: "-1", set: true, bad: true},
		{value: "lots", set: true, bad: true},
	})
}

// TestPerTapGroupRulesFromEnv checks the parsing of EnvPerTapGroupOuts and
// EnvPerTapGroupMinChannels.
func TestPerTapGroupRulesFromEnv(t *testing.T) {
	checkEnvParse(t, EnvPerTapGroupOuts, perTapGroupOutsFromEnv, []envCase[int64]{
		{set: false, want: perTapGroupOutsDefault},
		{value: "", set: true, want: perTapGroupOutsDefault},
		{value: "0", set: true, want: 0},
		{value: "8", set: true, want: 8},
		{value: "-1", set: true, bad: true},
		{value: "two", set: true, bad: true},
	})
	checkEnvParse(t, EnvPerTapGroupMinChannels, perTapGroupMinChannelsFromEnv, []envCase[int64]{
		{set: false, want: perTapGroupMinChannelsDefault},
		{value: "", set: true, want: perTapGroupMinChannelsDefault},
		{value: "512", set: true, want: 512},
		{value: "-3", set: true, bad: true},
		{value: "1k", set: true, bad: true},
	})
}

// TestHybridShareFromEnv checks the parsing of EnvHybridShare.
func TestHybridShareFromEnv(t *testing.T) {
	checkEnvParse(t, EnvHybridShare, hybridShareFromEnv, []envCase[float64]{
		{set: false, want: 0},
		{value: "", set: true, want: 0},
		{value: "0.5", set: true, want: 0.5},
		{value: "1", set: true, want: 1},
		{value: "0", set: true, bad: true},
		{value: "1.5", set: true, bad: true},
		{value: "-0.2", set: true, bad: true},
		{value: "NaN", set: true, bad: true},
		{value: "half", set: true, bad: true},
	})
}

// envCase is one setting of an environment variable: its value (set:
// whether it is set at all) and what the parser returns, or bad: an error
// naming the variable.
type envCase[T any] struct {
	value string
	set   bool
	want  T
	bad   bool
}

// checkEnvParse runs parse under each case's setting of key, one subtest
// per case.
func checkEnvParse[T any](t *testing.T, key string, parse func() (T, error), cases []envCase[T]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v=%q", tc.set, tc.value), func(t *testing.T) {
			setEnv(t, key, tc.value, tc.set)
			got, err := parse()
			if tc.bad {
				require.ErrorContains(t, err, key)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// setEnv sets environment variable key to value for the test, or, when
// set is false, unsets it for the test (restored afterwards either way).
func setEnv(t *testing.T, key, value string, set bool) {
	t.Helper()
	t.Setenv(key, value)
	if !set {
		require.NoError(t, os.Unsetenv(key))
	}
}

// TestPairsOrderGroupsFromEnv checks the parsing of EnvPairsOrderGroups.
func TestPairsOrderGroupsFromEnv(t *testing.T) {
	checkEnvParse(t, EnvPairsOrderGroups, pairsOrderGroupsFromEnv, []envCase[int64]{
		{set: false, want: -1},
		{value: "", set: true, want: -1},
		{value: "0", set: true, want: 0},
		{value: "6", set: true, want: 6},
		{value: "-1", set: true, bad: true},
		{value: "six", set: true, bad: true},
	})
}

// TestPairsOrderGroupsFor checks the weight gradient's choice of block
// order: a forced number wins, else for the window split (row slices)
// groups of pairsOrderGroupsAuto splits up to pairsOrderMaxSplits splits,
// and the launch order above and for every other split.
func TestPairsOrderGroupsFor(t *testing.T) {
	for _, c := range []struct {
		splits       int
		rowSlices    bool
		forced, want int64
	}{
		{splits: 2, rowSlices: true, forced: -1, want: pairsOrderGroupsAuto},
		{splits: 18, rowSlices: true, forced: -1, want: pairsOrderGroupsAuto},
		{splits: pairsOrderMaxSplits, rowSlices: true, forced: -1, want: pairsOrderGroupsAuto},
		{splits: pairsOrderMaxSplits + 1, rowSlices: true, forced: -1, want: 0},
		{splits: 503, rowSlices: true, forced: -1, want: 0},
		{splits: 18, rowSlices: false, forced: -1, want: 0},
		{splits: 1, rowSlices: false, forced: -1, want: 0},
		{splits: 18, rowSlices: true, forced: 0, want: 0},
		{splits: 503, rowSlices: true, forced: 6, want: 6},
		{splits: 7, rowSlices: false, forced: 2, want: 2},
	} {
		require.Equal(t, c.want, pairsOrderGroupsFor(c.splits, c.rowSlices, c.forced),
			"%d splits, row slices %v, forced %d", c.splits, c.rowSlices, c.forced)
	}
}

// TestHalfSkipFromEnv checks the parsing of EnvHalfSkip.
func TestHalfSkipFromEnv(t *testing.T) {
	checkEnvParse(t, EnvHalfSkip, halfSkipFromEnv, []envCase[bool]{
		{set: false, want: halfSkipDefault},
		{value: "", set: true, want: halfSkipDefault},
		{value: "1", set: true, want: true},
		{value: "0", set: true, want: false},
		{value: "tf32", set: true, bad: true},
	})
}

// TestRegisterAFromEnv checks the parsing of EnvRegisterA.
func TestRegisterAFromEnv(t *testing.T) {
	checkEnvParse(t, EnvRegisterA, registerAFromEnv, []envCase[bool]{
		{set: false, want: registerADefault},
		{value: "", set: true, want: registerADefault},
		{value: "1", set: true, want: true},
		{value: "0", set: true, want: false},
		{value: "yes", set: true, bad: true},
	})
}

// TestSwappedGathersFromEnv checks the parsing of EnvSwappedGathers.
func TestSwappedGathersFromEnv(t *testing.T) {
	checkEnvParse(t, EnvSwappedGathers, swappedGathersFromEnv, []envCase[bool]{
		{set: false, want: swappedGathersDefault},
		{value: "", set: true, want: swappedGathersDefault},
		{value: "1", set: true, want: true},
		{value: "0", set: true, want: false},
		{value: "yes", set: true, bad: true},
	})
}

// TestCubSortModeFromEnv checks the parsing of EnvCubSort.
func TestCubSortModeFromEnv(t *testing.T) {
	checkEnvParse(t, EnvCubSort, cubSortModeFromEnv, []envCase[cubSortMode]{
		{set: false, want: cubSortAbove},
		{value: "", set: true, want: cubSortAbove},
		{value: "all", set: true, want: cubSortAll},
		{value: "0", set: true, want: cubSortNever},
		{value: "1", set: true, bad: true},
	})
}

// TestOccupancyCapFromEnv checks the parsing of EnvOccupancyCap and the
// kernels it caps.
func TestOccupancyCapFromEnv(t *testing.T) {
	checkEnvParse(t, EnvOccupancyCap, occupancyCapFromEnv, []envCase[occupancyCap]{
		{set: false, want: occupancyCap{}},
		{value: "", set: true, want: occupancyCap{}},
		{value: "spconv_pertap_reduce=40", set: true, want: occupancyCap{prefixes: []string{"spconv_pertap_reduce"}, warps: 40}},
		{value: "kmap_,masks_=32", set: true, want: occupancyCap{prefixes: []string{"kmap_", "masks_"}, warps: 32}},
		{value: "kmap_", set: true, bad: true},
		{value: "kmap_=0", set: true, bad: true},
		{value: "kmap_=65", set: true, bad: true},
		{value: "=32", set: true, bad: true},
		{value: "kmap_,,masks_=32", set: true, bad: true},
	})
	c := occupancyCap{prefixes: []string{"kmap_", "masks_"}, warps: 32}
	require.Equal(t, 32, c.warpsFor("kmap_nbr_brick"))
	require.Equal(t, 32, c.warpsFor("masks_union"))
	require.Zero(t, c.warpsFor("spconv_reduce_f16"))
	all := occupancyCap{prefixes: []string{"spconv_"}, warps: 16}
	require.Equal(t, 16, all.warpsFor("spconv_pertap_reduce_f16"))
	require.Zero(t, all.warpsFor("spconv_gather_f16_m128n64k64w8x1s4hp4"), "GEMM kernels are never capped")
	require.Zero(t, all.warpsFor("spconv_pairs_f16_m128n128k32w2x4s3"))
	require.Zero(t, occupancyCap{}.warpsFor("kmap_nbr_brick"))
}

// TestCappedSmem checks that the padded shared memory leaves exactly the
// capped number of blocks resident on an H200 SM (233,472 bytes, 1 KiB
// reserved a block), counted independently of cappedSmem's formula.
func TestCappedSmem(t *testing.T) {
	const perSM, reserved = 233472, 1024
	resident := func(threads, smem, static int) int {
		bySmem := perSM / (smem + static + reserved)
		return min(bySmem, 2048/threads, 32)
	}
	for _, c := range []struct {
		warps, threads, smem, static int
		wantBlocks                   int
	}{
		{40, 256, 0, 0, 5},       // the per-tap sum at 44 registers
		{32, 256, 0, 0, 4},       // half an SM of 256-thread blocks
		{32, 256, 0, 4096, 4},    // static shared memory counted
		{8, 1024, 0, 0, 1},       // fewer warps than a block: one block
		{24, 128, 0, 0, 6},       // 4-warp blocks
		{63, 256, 0, 0, 7},       // rounds the block count down
		{64, 256, 0, 0, 8},       // no cap in effect
		{40, 256, 60000, 0, 3},   // already fewer blocks: smem kept
		{16, 512, 1 << 10, 0, 1}, // two 16-warp blocks would exceed 16 warps
	} {
		got := cappedSmem(c.warps, c.threads, c.smem, c.static, perSM, reserved)
		require.GreaterOrEqual(t, got, c.smem, "%+v", c)
		require.Truef(t, got%128 == 0 || got == c.smem, "%+v: %d not in 128-byte units", c, got)
		require.Equalf(t, c.wantBlocks, resident(c.threads, got, c.static), "%+v: smem %d", c, got)
	}
	require.Equal(t, 100, cappedSmem(0, 256, 100, 0, perSM, reserved), "no cap")
}
