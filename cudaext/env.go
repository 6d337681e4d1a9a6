package cudaext

// Engine settings read from the environment when an engine opens. They
// are parsed here, in files without the cudaext build tag, so their tests
// run without a GPU.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// EnvBrickMinRows names the environment variable that, read when the
// engine opens, sets the fewest rows from which submanifold maps take the
// brick search (a non-negative integer; default brickMinRows).
const EnvBrickMinRows = "FLEXGEMM_BRICK_MIN_ROWS"

// brickMinRowsFromEnv returns EnvBrickMinRows's value, or brickMinRows
// when it is unset; anything but a non-negative integer is an error.
func brickMinRowsFromEnv() (int, error) {
	return nonNegativeFromEnv(EnvBrickMinRows, brickMinRows, "rows")
}

// brickMinRows is the fewest rows for which the engine takes the brick
// search. Measured (H200, session 8, map phase of an inference step,
// FLEXGEMM_BRICK_MIN_ROWS=0 against the per-tap search, calls 5 and 6):
// RES 512 (1.0 M rows) 0.367 → 0.209 ms, RES 256 (252 K) 0.127 → 0.101;
// in session 8's call 1 (brick kernels before the warp-grouped insert and
// the looping neighbour kernel) RES 128 (64 K) 0.075 → 0.090 and RES 64
// (15 K) 0.092 → 0.112: below about a hundred thousand rows the host wait
// and the extra launches cost more than the shorter lookups save.
const brickMinRows = 1 << 17

// nonNegativeFromEnv returns the value of environment variable key as a
// non-negative integer count of what, or def when it is unset or empty;
// anything else is an error naming the variable.
func nonNegativeFromEnv(key string, def int, what string) (int, error) {
	v, ok := os.LookupEnv(key)
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cudaext: %s=%q: want a non-negative number of %s", key, v, what)
	}
	return n, nil
}

// EnvLongestFirstTilesPerSM names the environment variable that, read when
// the engine opens, sets the most row tiles per SM for which a masked
// gather launches its tiles longest first (from half a tile per SM on; a
// non-negative integer, 0: never; default longestFirstTilesPerSM).
const EnvLongestFirstTilesPerSM = "FLEXGEMM_LONGEST_FIRST_TILES_PER_SM"

// longestFirstTilesPerSMFromEnv returns EnvLongestFirstTilesPerSM's value,
// or longestFirstTilesPerSM when it is unset; anything but a non-negative
// integer is an error.
func longestFirstTilesPerSMFromEnv() (int, error) {
	return nonNegativeFromEnv(EnvLongestFirstTilesPerSM, longestFirstTilesPerSM, "tiles per SM")
}

// longestFirstTilesPerSM is the most row tiles per SM for which masked
// gathers launch their tiles longest first. A gather's blocks start in
// launch order as SMs free up, so with few tiles per SM the last long
// tiles decide the end: longest first (a stable sort by descending tap
// count) cut the fp16 step at RES 64 (119 row tiles of 128 rows, each
// four blocks wide at C 1024) by 4 % in training and 7 % in inference
// (H200, session 12, call 2; docs/PERF_NOTES.md step 28). It cost up to
// 2.6 % at RES 256 and 1024 then, when RES 256's tiles were in Gray order;
// since its masked order is regrouped (step 94) its tiles differ more in
// length and longest first shortens the 16-bit gathers there 2–3 %, and
// the fp16 and bf16 (256, 256, 2) inference steps 2.3 % and 7.4 % (the
// bench's medians; their fastest repeats 1.9 % and 2.2 %; 15 tiles per
// SM; session 44, call 1: four rounds of plain steps, bound 16 against
// 8, order alternated; step 95). It also cost (32, 1024, 4), 30
// row tiles, 2 % in inference (session 12, call 6), hence the lower bound
// of half a tile per SM (Device.longestFirst).
const longestFirstTilesPerSM = 16

// EnvLongestFirstTilesPerSMTF32 names the environment variable that, read
// when the engine opens, sets EnvLongestFirstTilesPerSM's bound for tf32
// gathers (a non-negative integer, 0: never; default
// longestFirstTilesPerSMTF32).
const EnvLongestFirstTilesPerSMTF32 = "FLEXGEMM_LONGEST_FIRST_TILES_PER_SM_TF32"

// longestFirstTilesPerSMTF32FromEnv returns EnvLongestFirstTilesPerSMTF32's
// value, or longestFirstTilesPerSMTF32 when it is unset; anything but a
// non-negative integer is an error.
func longestFirstTilesPerSMTF32FromEnv() (int, error) {
	return nonNegativeFromEnv(EnvLongestFirstTilesPerSMTF32, longestFirstTilesPerSMTF32, "tiles per SM")
}

// longestFirstTilesPerSMTF32 is longestFirstTilesPerSM for tf32 gathers,
// the same bound since step 95 (the switch stays separate). At RES 256
// (1,972 row tiles of 128 rows, 15 per SM) launching the tiles longest
// first cost the Gray-ordered fp16 gathers up to 2 % (step 28; session 42:
// ±1 %) but cut the tf32 ones, which multiply at half the rate and hold each SM
// twice as long per tile: forward −2.5 % in inference and −2.7 % in
// training, input gradient −4.6 % (H200, session 42, call 2, two
// interleaved rounds; docs/PERF_NOTES.md, step 93).
const longestFirstTilesPerSMTF32 = 16

// EnvStreamKTilesPerSM names the environment variable that, read when the
// engine opens, sets the most tiles per SM for which a split-K gather of a
// warp-specialised tile alone on its SM runs stream-K (Device.streamK;
// from half a tile per SM on; a non-negative integer, 0: never; default
// streamKTilesPerSM).
const EnvStreamKTilesPerSM = "FLEXGEMM_STREAMK_TILES_PER_SM"

// streamKTilesPerSMFromEnv returns EnvStreamKTilesPerSM's value, or
// streamKTilesPerSM when it is unset; anything but a non-negative integer
// is an error.
func streamKTilesPerSMFromEnv() (int, error) {
	return nonNegativeFromEnv(EnvStreamKTilesPerSM, streamKTilesPerSM, "tiles per SM")
}

// streamKTilesPerSM is the most tiles per SM for which split-K gathers run
// stream-K. With about a wave of tiles a gather lasts as long as its
// longest tile (the tap unions of RES 32's 128-row tiles: 19 to 27, mean
// 23.7; docs/PERF_NOTES.md, session 21); stream-K gives every SM the same
// share of the iterations, for a float32 round trip of each tile cut
// between two groups. H200, session 23, call 2 (step 52): the RES 32
// C 1024 gathers 14–15 % shorter, (32, 1024, 4) fp16 inference −12 % and
// training −7 %; at RES 64 (3.6 tiles per SM) and 128 (7.6) the SMs'
// balance improves too (active cycles max/mean 1.09 → 1.01 at RES 64) but
// the groups' out-of-step taps read 56 % more from DRAM and the steps
// gain nothing (+0.5 to +3 %), hence one tile per SM.
const streamKTilesPerSM = 1

// EnvRunSortMaxKeys names the environment variable that, read when the
// engine opens, sets the most 32-bit keys that radixSort sorts by runs
// and merges (two to three launches) instead of radix passes (an integer
// from 0, never, to runSortLimit; default runSortLimit).
const EnvRunSortMaxKeys = "FLEXGEMM_RUN_SORT_MAX_KEYS"

// runSortMaxKeysFromEnv returns EnvRunSortMaxKeys's value, or runSortLimit
// when it is unset; anything but an integer in [0, runSortLimit] is an
// error.
func runSortMaxKeysFromEnv() (int, error) {
	n, err := nonNegativeFromEnv(EnvRunSortMaxKeys, runSortLimit, "keys")
	if err == nil && n > runSortLimit {
		err = fmt.Errorf("cudaext: %s=%d: the run sort takes at most %d keys", EnvRunSortMaxKeys, n, runSortLimit)
	}
	return n, err
}

// runSortLimit is the most keys the run sort's kernels take
// (kernels/sort.cu kRunSort).
const runSortLimit = 65536

// EnvPairsWindowRows names the environment variable that, read when the
// engine opens, sets the output rows per slice of the weight gradient's
// window split (a positive integer; default pairsWindowRows).
const EnvPairsWindowRows = "FLEXGEMM_PAIRS_WINDOW_ROWS"

// pairsWindowRows is the default window of windowPairsSplits (conv.go).
const pairsWindowRows = 8192

// pairsWindowRowsFromEnv returns EnvPairsWindowRows's value, or
// pairsWindowRows when it is unset; anything but a positive integer is an
// error.
func pairsWindowRowsFromEnv() (int64, error) {
	n, err := nonNegativeFromEnv(EnvPairsWindowRows, pairsWindowRows, "rows")
	if err == nil && n == 0 {
		err = fmt.Errorf("cudaext: %s=0: want a positive number of rows", EnvPairsWindowRows)
	}
	return int64(n), err
}

// EnvNoFusedBias names the environment variable that, set to "1" when an
// engine opens, makes ParamGrads run BiasGrad's kernels after the weight
// gradient instead of summing the bias gradient in the weight gradient's
// kernel (fusesBias; session 25, step 56).
const EnvNoFusedBias = "FLEXGEMM_NO_FUSED_BIAS"

// EnvPairsOrderGroups names the environment variable that, read when an
// engine opens, fixes how the weight gradient of a submanifold 3×3×3 map
// orders its blocks, whatever its split: in groups of that many splits,
// each group's taps by the length of their offset
// (PairsParams.order_groups), or 0 for the launch order (tile, tap,
// split). Unset, the engine chooses (pairsOrderGroupsFor: groups only for
// the window split of few splits).
const EnvPairsOrderGroups = "FLEXGEMM_PAIRS_ORDER_GROUPS"

// pairsOrderGroupsFromEnv reads EnvPairsOrderGroups: −1 (the engine
// chooses) when it is unset or empty; anything but a non-negative integer
// is an error.
func pairsOrderGroupsFromEnv() (int64, error) {
	n, err := nonNegativeFromEnv(EnvPairsOrderGroups, -1, "splits")
	return int64(n), err
}

// pairsOrderGroupsFor is PairsParams.order_groups of a weight gradient
// of a submanifold 3×3×3 map in splits slices (row slices: the window
// split): forced when it is ≥ 0 (EnvPairsOrderGroups), else for the
// window split groups of pairsOrderGroupsAuto splits up to
// pairsOrderMaxSplits splits, and the launch order above and for every
// other split. Measured on the
// H200 (session 26, call 3, fp16 training, the weight-gradient kernels of
// a step, two rounds): 18 splits (RES 256 C 256) 2.20 → 2.06 ms in groups
// of 3 (2.08 in groups of 2, 2.06 of 6, 2.17 of 1; bf16 2.14 → 1.97), the
// step −2.0 %; 126 splits (RES 512 C 128) 2.61 → 2.59 ms and 503 (RES
// 1024 C 64) 3.48 → 3.49 ms, within the noise: a launch of many splits
// has a short tail (bench pairsched: +5 % and +1 % over its bound,
// against +18 % at 18 splits).
func pairsOrderGroupsFor(splits int, rowSlices bool, forced int64) int64 {
	switch {
	case forced >= 0:
		return forced
	case rowSlices && splits <= pairsOrderMaxSplits:
		return pairsOrderGroupsAuto
	}
	return 0
}

// pairsOrderGroupsAuto and pairsOrderMaxSplits are pairsOrderGroupsFor's
// choice.
const (
	pairsOrderGroupsAuto = 3
	pairsOrderMaxSplits  = 32
)

// EnvNoRowSlices names the environment variable that, set to "1" when an
// engine opens, cuts the weight gradient's window split (windowPairsSplits)
// into equal shares of every tap's pairs, as before session 14, instead
// of at the same output rows in every tap (fg::PairsParams.off).
const EnvNoRowSlices = "FLEXGEMM_NO_ROW_SLICES"

// EnvNoRowsFirst names the environment variable that, set to "1" when an
// engine opens, keeps masked gathers from launching their tiles in the
// order of their first rows (Device.rowsFirst): they run in the Gray
// order's tile order, as before session 14.
const EnvNoRowsFirst = "FLEXGEMM_NO_ROWS_FIRST"

// EnvRowsFirstMinRows names the environment variable that, read when an
// engine opens, sets the fewest table rows from which masked gathers
// launch their tiles by their first rows (Device.rowsFirst, unless they
// run longest first or EnvNoRowsFirst); a non-negative integer, default
// rowsFirstMinRows.
const EnvRowsFirstMinRows = "FLEXGEMM_ROWS_FIRST_MIN_ROWS"

// EnvNoRegroup names the environment variable that, set to "1" when an
// engine opens, keeps the device's masked orders in the Gray order
// instead of regrouping them where kmap.Regroups says so (an experiment
// switch: the device's orders then differ from package kmap's, which the
// GPU tests compare).
const EnvNoRegroup = "FLEXGEMM_NO_REGROUP"

// EnvRegroupMaxRows names the environment variable that, read when an
// engine opens, sets the most rows of a table whose device masked order is
// regrouped (a non-negative integer; unset: kmap.RegroupMaxRows, the
// bound both engines share). An experiment switch, with which session 43
// found that RES 256's 252,392 rows gain from regrouping and RES 512's
// million do not (kmap.RegroupMaxRows); where it differs from kmap's
// bound the device's orders differ from package kmap's (results do not:
// each output row's sum is the same in any row order).
const EnvRegroupMaxRows = "FLEXGEMM_REGROUP_MAX_ROWS"

// regroupMaxRowsFromEnv returns EnvRegroupMaxRows's value, or
// kmap.RegroupMaxRows when it is unset; anything but a non-negative
// integer is an error.
func regroupMaxRowsFromEnv() (int, error) {
	return nonNegativeFromEnv(EnvRegroupMaxRows, kmap.RegroupMaxRows, "rows")
}

// EnvRegroupThreads names the environment variable that, read when an
// engine opens, sets the block of the regrouping kernels: 256
// (masks_regroup32/64), 512 (unset or empty: masks_regroup{32,64}_t512) or
// 1024 (_t1024). The 512- and 1,024-thread kernels hold four or two mask
// classes per thread and run the greedy's pass block-wide from 129 classes
// on; the orders are the same whatever the block.
const EnvRegroupThreads = "FLEXGEMM_REGROUP_THREADS"

// regroupKernelThreads is the block of masks_regroup32/64 (masks.cu's
// kRegroupThreads); the kernels of other blocks carry it in their names
// (_t512, _t1024).
const regroupKernelThreads = 256

// regroupThreads is the default block of the regrouping kernels. The
// greedy's pass costs about a microsecond on 256 threads (0.107 ms per
// map at RES 64, 86 passes in each of 8 windows); on 512 threads the
// kernel took 0.086 ms at RES 64 (−20 %), 0.060 against 0.063 ms at RES
// 128 and 0.033 against 0.038 ms at RES 256; 1,024 threads 0.091 / 0.064
// / 0.033 (H200, session 44, call 1, two interleaved rounds of chained
// phases; docs/PERF_NOTES.md, step 95).
const regroupThreads = 512

// regroupBlocks are the blocks the regrouping kernels are built for
// (masks.cu's FG_MASKS_REGROUP entries): masks_regroup32/64 and their
// _t512 and _t1024 twins. regroupThreads is one of them.
var regroupBlocks = []int{regroupKernelThreads, 512, 1024}

// regroupThreadsFromEnv returns EnvRegroupThreads's value, or
// regroupThreads when it is unset or empty; anything but one of
// regroupBlocks, written in decimal, is an error naming the variable.
func regroupThreadsFromEnv() (int, error) {
	v := os.Getenv(EnvRegroupThreads)
	if v == "" {
		return regroupThreads, nil
	}
	for _, b := range regroupBlocks {
		if v == strconv.Itoa(b) {
			return b, nil
		}
	}
	return 0, fmt.Errorf("cudaext: %s=%q: want one of %v threads", EnvRegroupThreads, v, regroupBlocks)
}

// EnvNoOnesweep names the environment variable that, set to "1" when an
// engine opens, sorts keys above the run sort's 65,536 by the classic
// radix passes — a histogram, a scan and a scatter launch per digit — as
// before session 21, instead of the one-wave sort where its tiles fit
// (Device.waveSort) or the onesweep sort up to onesweepMaxTiles tiles
// (Device.onesweep).
const EnvNoOnesweep = "FLEXGEMM_NO_ONESWEEP"

// EnvCubSort names the environment variable that, read when an engine
// opens, chooses the radix sorts that run on CUB's onesweep agents
// (Device.cubSort, kernels/sort_cub.cuh): unset, those of more than
// onesweepMaxTiles tiles of 2,048 keys (the classic passes took them
// before the fortieth session, and still do under EnvNoOnesweep); "all",
// every radix sort above the run sort; "0", none.
const EnvCubSort = "FLEXGEMM_CUB_SORT"

// cubSortMode says which radix sorts Device.cubSort runs (EnvCubSort).
type cubSortMode int

const (
	// cubSortAbove: those of more than onesweepMaxTiles tiles (the default).
	cubSortAbove cubSortMode = iota
	// cubSortAll: every radix sort (the run sort still takes up to runSortMax 32-bit keys).
	cubSortAll
	// cubSortNever: none (the classic passes take those above onesweepMaxTiles).
	cubSortNever
)

// cubSortModeFromEnv reads EnvCubSort: unset or empty cubSortAbove, "all"
// cubSortAll, "0" cubSortNever, an error naming the variable otherwise.
func cubSortModeFromEnv() (cubSortMode, error) {
	switch v := os.Getenv(EnvCubSort); v {
	case "":
		return cubSortAbove, nil
	case "all":
		return cubSortAll, nil
	case "0":
		return cubSortNever, nil
	default:
		return 0, fmt.Errorf("cudaext: %s=%q: want all or 0", EnvCubSort, v)
	}
}

// EnvHalfSkip names the environment variable that, read when an engine
// opens, runs the half-skip twins of the warp-specialised gathers where
// they exist ("1"; kernels.HalfSkipName: tf32 tiles of two or more
// warpgroups, unsplit launches over a table), or never ("0", and unset:
// halfSkipDefault). An experiment switch, off because it loses: the twin
// gives the same bits but its gathers ran 8–10 % slower than the plain
// kernel's on the H200 (session 42: +7.8 % at RES 256, +10 % at RES 64),
// although its stage loop that multiplies is the plain kernel's
// (docs/PERF_NOTES.md, steps 92, 92b and 92c).
const EnvHalfSkip = "FLEXGEMM_HALF_SKIP"

// halfSkipDefault is EnvHalfSkip's setting when unset.
const halfSkipDefault = false

// halfSkipFromEnv returns EnvHalfSkip's setting: halfSkipDefault when
// unset or empty, true for "1", false for "0", an error naming the
// variable otherwise.
func halfSkipFromEnv() (bool, error) {
	return switchFromEnv(EnvHalfSkip, halfSkipDefault)
}

// EnvRegisterA names the environment variable that, read when an engine
// opens, runs the register-A twins of the warp-specialised tf32 gathers
// where they exist and the gather allows ("1"; kernels.RegisterAName:
// tiles of 128 columns, the weight as stored, K of whole
// 32-column chunks over 16-byte rows, no stream-K launch), or never ("0";
// unset: registerADefault). Their consumers load the gathered rows into
// registers instead of the producers copying them to shared memory
// (docs/PERF_NOTES.md, step 123).
const EnvRegisterA = "FLEXGEMM_REGISTER_A"

// registerADefault is EnvRegisterA's setting when unset.
const registerADefault = false

// registerAFromEnv returns EnvRegisterA's setting: registerADefault when
// unset or empty, true for "1", false for "0", an error naming the
// variable otherwise.
func registerAFromEnv() (bool, error) {
	return switchFromEnv(EnvRegisterA, registerADefault)
}

// EnvSwappedGathers names the environment variable that, read when an
// engine opens, runs the swapped twins of the warp-specialised gathers of
// 128 rows and 64 columns, and of the tiles of 256 rows and 128 columns
// (tf32: EnvSwappedWide; 16-bit: EnvSwappedWide16), where the gather
// allows ("1";
// kernels.SwappedName: unsplit, no stream-K, the weight as stored — every
// tf32 gather, the 16-bit forward ones; the 16-bit input gradients' under
// EnvSwappedWT —, 16-byte rows), or never
// ("0"; unset: swappedGathersDefault, on). A consumer warpgroup per 64
// output columns multiplies the transposed tile, reading each weight stage
// from shared memory once (docs/PERF_NOTES.md, steps 125, 127 and 138).
const EnvSwappedGathers = "FLEXGEMM_SWAPPED_GATHERS"

// swappedGathersDefault is EnvSwappedGathers's setting when unset.
// Measured (H200, session 62, call 5, docs/PERF_NOTES.md step 125; three
// alternated rounds, medians): tf32 (1024, 64, 2) inference 6.823 →
// 6.515 ms (−4.5 %), training 19.729 → 19.143 (−3.0 %); each forward
// gather 3.00 → 2.82 ms.
const swappedGathersDefault = true

// swappedGathersFromEnv returns EnvSwappedGathers's setting:
// swappedGathersDefault when unset or empty, true for "1", false for "0",
// an error naming the variable otherwise.
func swappedGathersFromEnv() (bool, error) {
	return switchFromEnv(EnvSwappedGathers, swappedGathersDefault)
}

// EnvSpecializedGathers names the environment variable that, read when an
// engine opens, turns the fixed heuristic's warp-specialised gather tiles
// (kernels.Tile.Producers) on ("1") or off ("0"); unset,
// specializedGathersDefault.
const EnvSpecializedGathers = "FLEXGEMM_SPECIALIZED_GATHERS"

// specializedGathersDefault is EnvSpecializedGathers's setting when unset.
const specializedGathersDefault = true

// specializedGathers says whether hopperDefault prefers the warp-specialised
// gather tiles (EnvSpecializedGathers, read by Open).
var specializedGathers atomic.Bool

// EnvPersistentGathers names the environment variable that, read when an
// engine opens, runs the warp-specialised gathers whose blocks hold two
// tile descriptions (kernels.Tile.Descriptions) as persistent blocks, as
// many as are resident at once, each taking its next tile from a counter
// while it stores the last ("1"), or a block per tile ("0"); unset,
// persistentGathersDefault.
const EnvPersistentGathers = "FLEXGEMM_PERSISTENT_GATHERS"

// persistentGathersDefault is EnvPersistentGathers's setting when unset.
const persistentGathersDefault = true

// persistentGathers says whether warp-specialised gathers of one block per
// SM run persistent blocks (EnvPersistentGathers, read by Open).
var persistentGathers atomic.Bool

// EnvFusedSplitReduce names the environment variable that, read when an
// engine opens, lets the split-K gathers of warp-specialised tiles sum
// their partials in the kernel where all their blocks are resident ("1",
// Device.fusesSplitReduce), or always launches the reduction kernel after
// them ("0"); unset, fusedSplitReduceDefault.
const EnvFusedSplitReduce = "FLEXGEMM_FUSED_SPLIT_REDUCE"

// fusedSplitReduceDefault is EnvFusedSplitReduce's setting when unset.
const fusedSplitReduceDefault = true

// fusedSplitReduce says whether split-K gathers of warp-specialised tiles
// may sum their partials in the kernel (EnvFusedSplitReduce, read by Open;
// Device.fusesSplitReduce).
var fusedSplitReduce atomic.Bool

// EnvNarrowPersistent names the environment variable that, read when an
// engine opens, makes the fixed heuristic's 16-bit 64-column gathers of
// many rows take the three-stage 128×64 warp-specialised tile, two
// persistent blocks per SM each describing its next tile while it
// finishes this one ("1"), instead of the four-stage tile of a block per
// tile ("0"); unset, narrowPersistentDefault.
const EnvNarrowPersistent = "FLEXGEMM_NARROW_PERSISTENT"

// narrowPersistentDefault is EnvNarrowPersistent's setting when unset.
// Measured (H200, session 34, call 2, docs/PERF_NOTES.md step 74; three
// interleaved rounds, min): (1024, 64, 2) inference 5.157 → 4.936 ms,
// training 10.750 → 10.632 (forward gathers 2.00–2.10 → 1.96–2.08 ms a
// layer); nothing else takes the tile.
const narrowPersistentDefault = true

// narrowPersistent says whether hopperDefault takes the three-stage
// 128×64 warp-specialised tile (two persistent blocks per SM) for 16-bit
// 64-column gathers (EnvNarrowPersistent, read by Open). tf32 gathers
// keep the four-stage tile (step 119: tf32 (1024, 64, 2) inference −3.1 %,
// training −1.5 % against the three-stage one).
var narrowPersistent atomic.Bool

// EnvTallGathers names the environment variable that, read when an engine
// opens, makes the fixed heuristic's gathers of 129–192 rows and at least
// 128 columns over at most kernels.MaxSpecializedTaps taps take the
// 192×128 warp-specialised tile, one row tile instead of two of 128 rows
// ("1"), or the 128-row tiles ("0"); unset, tallGathersDefault.
const EnvTallGathers = "FLEXGEMM_TALL_GATHERS"

// tallGathersDefault is EnvTallGathers's setting when unset (the
// measurement is in docs/PERF_NOTES.md, step 110).
const tallGathersDefault = true

// tallGathers says whether hopperDefault takes the 192-row
// warp-specialised tile for gathers of 129–192 rows (EnvTallGathers, read
// by Open).
var tallGathers atomic.Bool

// EnvTallDeep names the environment variable that, read when an engine
// opens, makes the 192-row gathers of EnvTallGathers take the 192×128
// tile of five stages and one tile description ("1") or of four stages
// and two ("0"); unset, tallDeepDefault.
const EnvTallDeep = "FLEXGEMM_TALL_DEEP"

// tallDeepDefault is EnvTallDeep's setting when unset (the measurement
// is in docs/PERF_NOTES.md, step 116: RES 8 fp16 inference −5.3 %,
// training −4.8 %).
const tallDeepDefault = true

// tallDeep says whether hopperDefault's 192-row gathers take the
// five-stage tile rather than the four-stage one (EnvTallDeep, read by
// Open).
var tallDeep atomic.Bool

// EnvTallMany names the environment variable that, read when an engine
// opens, gives the fixed heuristic's 16-bit gathers of 128–255 columns
// and at least tallManyRows rows the four-stage 192×128 warp-specialised
// tile ("1") or the six-stage 128×128 one ("0"); unset, tallManyDefault.
const EnvTallMany = "FLEXGEMM_TALL_MANY"

// tallManyDefault is EnvTallMany's setting when unset.
const tallManyDefault = true

// tallMany says whether hopperDefault's 16-bit gathers of 128–255
// columns and at least tallManyRows rows take the four-stage 192×128
// warp-specialised tile rather than the 128×128 one (EnvTallMany, read by
// Open).
var tallMany atomic.Bool

// EnvSwappedWide names the environment variable that, read when an engine
// opens, gives the fixed heuristic's tf32 gathers of 128–255 columns over
// at least tallManyRows rows (16-byte rows, at most
// kernels.MaxSpecializedTaps taps) the 256×128 warp-specialised tile,
// whose swapped twin runs them where EnvSwappedGathers is on too ("1"), or
// the six-stage 128×128 tile ("0"); unset, swappedWideDefault.
const EnvSwappedWide = "FLEXGEMM_SWAPPED_WIDE"

// swappedWideDefault is EnvSwappedWide's setting when unset. Measured
// (H200, session 63, call 3, docs/PERF_NOTES.md step 127; three
// alternated rounds, medians): tf32 (512, 128, 2) inference 4.396 →
// 4.238 ms (−3.6 %), training 13.062 → 12.811 (−1.9 %).
const swappedWideDefault = true

// swappedWide says whether hopperDefault gives tf32 gathers of 128–255
// columns over many rows the 256×128 tile (EnvSwappedWide and
// EnvSwappedGathers, read by Open).
var swappedWide atomic.Bool

// EnvSwappedWide16 names the environment variable that, read when an
// engine opens, gives the fixed heuristic's 16-bit forward gathers of
// 128–255 columns over at least tallManyRows rows (16-byte rows, at most
// kernels.MaxSpecializedTaps taps) the 16-bit 256×128 warp-specialised
// tile, whose swapped twin runs them where EnvSwappedGathers is on too
// ("1"), or leaves them the 192×128 tile of EnvTallMany ("0"); unset,
// swappedWide16Default (on). The input gradients, which read the weight
// transposed, take it only where EnvSwappedWT runs their swapped twins
// too (docs/PERF_NOTES.md steps 138 and 139).
const EnvSwappedWide16 = "FLEXGEMM_SWAPPED_WIDE16"

// swappedWide16Default is EnvSwappedWide16's setting when unset. Measured
// (H200, session 68, call 1, docs/PERF_NOTES.md step 138): the RES 512 C
// 128 forward gather 1.058 → 0.965 device-ms (f16) and 1.036 → 0.948
// (bf16) against the 192×128 tile (BenchmarkConvTiles, 20 calls); three
// alternated rounds, medians: fp16 (512, 128, 2) inference 2.593 → 2.369
// ms (−8.6 %), training 6.250 → 6.086 (−2.6 %); bf16 −10.3 % / −2.2 %.
const swappedWide16Default = true

// EnvSwappedWT names the environment variable that, read when an engine
// opens, runs the swapped twins of the 16-bit input gradients (the gathers
// that read the weight transposed: kernels.SwappedTransposedName) where
// the gather allows, as EnvSwappedGathers does for the other gathers
// ("1"), and then gives the fixed heuristic's 16-bit input gradients of
// 128–255 columns over many rows the 256×128 tile too where
// EnvSwappedWide16 is on; or neither ("0"); unset, swappedWTDefault (on;
// docs/PERF_NOTES.md step 139). It needs EnvSwappedGathers on.
const EnvSwappedWT = "FLEXGEMM_SWAPPED_WT"

// swappedWTDefault is EnvSwappedWT's setting when unset. Measured (H200,
// session 68, call 4, docs/PERF_NOTES.md step 139; three alternated rounds,
// medians): fp16 (512, 128, 2) training 6.131 → 5.851 ms (−4.6 %), bf16
// −4.4 %, (1024, 64, 2) −2.9 / −2.1 %; the RES 1024 C 64 input gradient
// 1.805 → 1.636 device-ms on its default tile (BenchmarkConvTiles, f16).
const swappedWTDefault = true

// swappedWT says whether the 16-bit input gradients run their tiles'
// swapped twins (EnvSwappedWT and EnvSwappedGathers, read by Open).
var swappedWT atomic.Bool

// swappedWide16 says whether hopperDefault gives 16-bit forward gathers of
// 128–255 columns over many rows the 256×128 tile (EnvSwappedWide16 and
// EnvSwappedGathers, read by Open).
var swappedWide16 atomic.Bool

// EnvSharedIndex names the environment variable that, read when an engine
// opens, runs the warp-specialised gathers whose blocks hold two
// description heads sharing one index (kernels.Tile.Indices: the tf32
// 256×128 tile, the 16-bit five-stage 192×128 one, the 128×64 four-stage
// ones) as persistent blocks where EnvPersistentGathers is on too ("1"),
// or a block per tile ("0"); unset, sharedIndexDefault. Off, those
// gathers launch as they did when their blocks held one description, so
// an A/B of the step runs both in one binary.
const EnvSharedIndex = "FLEXGEMM_SHARED_INDEX"

// sharedIndexDefault is EnvSharedIndex's setting when unset
// (docs/PERF_NOTES.md step 134).
const sharedIndexDefault = true

// sharedIndex says whether the gathers of tiles with a shared description
// index run persistent blocks (EnvSharedIndex, read by Open).
var sharedIndex atomic.Bool

// EnvTF32Narrow names the environment variable that, read when an engine
// opens, gives the fixed heuristic's tf32 gathers of 64–255 columns the
// tf32 warp-specialised Hopper tiles of 64 and 128 columns ("1") or the
// mma.sync tiles ("0"); unset, tf32NarrowDefault.
const EnvTF32Narrow = "FLEXGEMM_TF32_NARROW"

// tf32NarrowDefault is EnvTF32Narrow's setting when unset.
const tf32NarrowDefault = true

// tf32Narrow says whether hopperDefault gives tf32 gathers of 64–255
// columns the tf32 specialised tiles of 64 and 128 columns rather than
// the mma.sync tiles (EnvTF32Narrow, read by Open).
var tf32Narrow atomic.Bool

// EnvTF32Clear names the environment variable that, read when an engine
// opens, hands tf32 products their weight operand with the 13 low mantissa
// bits cleared ("1": the copy of tf32Operand, up to tf32ClearMaxBytes, and
// the input gradient's transposed weight), or the weight as stored ("0");
// unset, tf32ClearDefault. Either way the products are the same bits:
// mma.sync and wgmma read a tf32 operand's sign, exponent and first 10
// mantissa bits and ignore the rest.
const EnvTF32Clear = "FLEXGEMM_TF32_CLEAR"

// tf32ClearDefault is EnvTF32Clear's setting when unset. Measured (H200,
// session 53, docs/PERF_NOTES.md step 108): tf32 (256, 256, 2) inference
// and training faster under the power cap with the weight's ignored bits
// cleared.
const tf32ClearDefault = true

// tf32ClearedOperands says whether tf32 products get their weight operand
// with the 13 low mantissa bits cleared (EnvTF32Clear, read by Open;
// Engine.tf32Operand and transposeW).
var tf32ClearedOperands atomic.Bool

// EnvProgrammaticLaunch names the environment variable that, read when an
// engine opens on a GPU of compute capability 9.0 or newer, launches every
// kernel that waits for the grids ahead of it (all of the embedded images'
// kernels, kernels.KernelWaits) with programmatic stream serialization, so
// that its blocks start while the kernel ahead drains ("1"), or launches
// every kernel after the one ahead has finished ("0"); unset,
// programmaticLaunchDefault.
const EnvProgrammaticLaunch = "FLEXGEMM_PDL"

// programmaticLaunchDefault is EnvProgrammaticLaunch's setting when unset.
const programmaticLaunchDefault = true

// programmaticLaunchFromEnv returns EnvProgrammaticLaunch's setting:
// programmaticLaunchDefault when unset or empty, true for "1", false for
// "0", an error naming the variable otherwise.
func programmaticLaunchFromEnv() (bool, error) {
	return switchFromEnv(EnvProgrammaticLaunch, programmaticLaunchDefault)
}

// EnvPerTapMaxMB names the environment variable that, read when an engine
// opens, sets the largest slot buffer of a per-tap gather in MiB (Device.perTapMaxBytes,
// pertap.go; 0: never per tap).
const EnvPerTapMaxMB = "FLEXGEMM_PERTAP_MAX_MB"

// perTapMaxMBDefault is EnvPerTapMaxMB's setting when unset: slot buffers
// of up to 32 MiB, which at C = 1024 admits maps of about a thousand rows
// (RES 16: 25 MB) and not (32, 1024, 4)'s 107 MB. Measured (H200, session
// 32, docs/PERF_NOTES.md step 70, 32 MiB against 0): (16, 1024, 8) training
// 7.9–11.2 % and inference 5.7–9.7 % faster; (8, 1024, 16) slower, which
// perTapMinBlocks now excludes; (32, 1024, 4) within ±2 % (and its slot
// buffer over FlexGEMM's training peak). The cached tables raised that
// training step's peak by 0.2 MiB until weight gradients dropped them
// (dropPerTap, session 33).
const perTapMaxMBDefault = 32

// perTapMaxBytesFromEnv returns EnvPerTapMaxMB's setting in bytes:
// perTapMaxMBDefault MiB when unset or empty, an error naming the variable
// for anything but a non-negative integer.
func perTapMaxBytesFromEnv() (int64, error) {
	mb, err := nonNegativeFromEnv(EnvPerTapMaxMB, perTapMaxMBDefault, "MiB")
	return int64(mb) << 20, err
}

// EnvPerTapGroupOuts names the environment variable that, read when an
// engine opens, sets the slot buffer of a tf32 forward gather that runs per
// tap in groups of tiles (pertap.go) in units of the gather's result: a
// group's products take at most this many times the result's bytes (or
// EnvPerTapMaxMB's limit if that is more); 0: forwards run per tap only
// when all their slots fit that limit at once, as before groups.
const EnvPerTapGroupOuts = "FLEXGEMM_PERTAP_GROUP_OUTS"

// perTapGroupOutsDefault is EnvPerTapGroupOuts's setting when unset: a
// group's slot buffer of up to six results. At tf32 (64, 1024, 2) (slots
// 0.79 GB, result 62 MB) that is three groups of about 0.26 GB: the
// inference step's peak 0.39 → 0.65 GB (FlexGEMM's: 0.83 GB), and the
// training step's forward (about 0.37 GB alive) stays under its peak at the
// weight gradients (0.72 GB). Measured (H200, session 46, step 97): four
// results (four groups) against 0, inference 4.47 → 3.82 ms, peak 0.58 GB,
// training 11.7 → 11.2 ms, peak unchanged; eight (two groups) inference
// 3.47 ms but both peaks 0.763 GB, 1.5 % under FlexGEMM's training peak;
// the slot buffer in one piece had put the inference peak at 1.13 GB.
const perTapGroupOutsDefault = 6

// perTapGroupOutsFromEnv returns EnvPerTapGroupOuts's setting:
// perTapGroupOutsDefault when unset or empty, an error naming the variable
// for anything but a non-negative integer.
func perTapGroupOutsFromEnv() (int64, error) {
	n, err := nonNegativeFromEnv(EnvPerTapGroupOuts, perTapGroupOutsDefault, "results")
	return int64(n), err
}

// EnvPerTapGroupMinChannels names the environment variable that, read when
// an engine opens, sets the fewest input channels of a forward gather that
// runs per tap in groups (pertap.go; a non-negative integer, default
// perTapGroupMinChannelsDefault).
const EnvPerTapGroupMinChannels = "FLEXGEMM_PERTAP_GROUP_MIN_CHANNELS"

// perTapGroupMinChannelsDefault is EnvPerTapGroupMinChannels's setting
// when unset: a slot's product row of N float32 values costs 8·N bytes of
// memory traffic (written, read back) against the 2·K·N useful products it
// saves from the masked tile's padding, so only wide inputs pay for it
// (K = 1024: 256 products a byte; the H200's tf32 rate over its memory
// rate is about 100).
const perTapGroupMinChannelsDefault = 1024

// perTapGroupMinChannelsFromEnv returns EnvPerTapGroupMinChannels's
// setting: perTapGroupMinChannelsDefault when unset or empty, an error
// naming the variable for anything but a non-negative integer.
func perTapGroupMinChannelsFromEnv() (int64, error) {
	n, err := nonNegativeFromEnv(EnvPerTapGroupMinChannels, perTapGroupMinChannelsDefault, "channels")
	return int64(n), err
}

// EnvHybridShare names the environment variable that, read when an engine
// opens, turns on the hybrid tf32 gathers (forwards and input gradients)
// of submanifold maps (hybrid.go; an experiment, off by default: session
// 47 measured −4 % at tf32 (64, 1024, 2) inference, but a training peak
// over FlexGEMM's there and losses at RES 128 and 256): the taps that
// fewer than this share of a masked tile's rows hold leave the tile and
// run per tap. A number in (0, 1]; unset or empty: off.
const EnvHybridShare = "FLEXGEMM_HYBRID_SHARE"

// hybridShareFromEnv returns EnvHybridShare's setting: 0 (off) when unset
// or empty, the share for a number in (0, 1], an error naming the variable
// otherwise. (Above 1 a tile's centre tap, which every row of a
// submanifold map holds, would leave it too, and a tile could be left
// without taps.)
func hybridShareFromEnv() (float64, error) {
	v, ok := os.LookupEnv(EnvHybridShare)
	if !ok || v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0 && f <= 1) {
		return 0, fmt.Errorf("cudaext: %s=%q: want a share of a tile's rows in (0, 1]", EnvHybridShare, v)
	}
	return f, nil
}

// switchFromEnv returns the on/off setting of environment variable key:
// def when unset or empty, true for "1", false for "0", an error naming
// the variable otherwise.
func switchFromEnv(key string, def bool) (bool, error) {
	switch v := os.Getenv(key); v {
	case "":
		return def, nil
	case "1":
		return true, nil
	case "0":
		return false, nil
	default:
		return false, fmt.Errorf("cudaext: %s=%q: want 0 or 1", key, v)
	}
}

// EnvOrderedSplits names the environment variable that, read when an
// engine opens, makes the split weight gradients of the 16-bit Hopper
// tiles add their split slices into a float32 sum in split order in the
// kernel ("1": PairsParams.tickets; the float32 result itself, or a
// scratch sum the last slice rounds into a 16-bit result; no partials and
// no reduction launch; the same bits) or write partials for spconv_reduce
// ("0"); unset, orderedSplitsDefault.
const EnvOrderedSplits = "FLEXGEMM_ORDERED_SPLITS"

// orderedSplitsDefault is EnvOrderedSplits's setting when unset.
const orderedSplitsDefault = false

// orderedSplitsFromEnv returns EnvOrderedSplits's setting.
func orderedSplitsFromEnv() (bool, error) {
	return switchFromEnv(EnvOrderedSplits, orderedSplitsDefault)
}

// openSwitches are the on/off switches Open reads from the environment
// (switchFromEnv) and stores in the package's switches the tile
// heuristic and the gather launches read: each variable, its setting when
// unset, the switch it sets.
var openSwitches = []openSwitch{
	{EnvSpecializedGathers, specializedGathersDefault, &specializedGathers},
	{EnvPersistentGathers, persistentGathersDefault, &persistentGathers},
	{EnvFusedSplitReduce, fusedSplitReduceDefault, &fusedSplitReduce},
	{EnvNarrowPersistent, narrowPersistentDefault, &narrowPersistent},
	{EnvTF32Clear, tf32ClearDefault, &tf32ClearedOperands},
	{EnvTallGathers, tallGathersDefault, &tallGathers},
	{EnvTallDeep, tallDeepDefault, &tallDeep},
	{EnvTF32Narrow, tf32NarrowDefault, &tf32Narrow},
	{EnvTallMany, tallManyDefault, &tallMany},
	{EnvSwappedWide, swappedWideDefault, &swappedWide},
	{EnvSwappedWide16, swappedWide16Default, &swappedWide16},
	{EnvSwappedWT, swappedWTDefault, &swappedWT},
	{EnvSharedIndex, sharedIndexDefault, &sharedIndex},
}

// openSwitch is one of openSwitches: an environment variable, its
// setting when unset, the package switch it sets.
type openSwitch struct {
	env string
	def bool
	to  *atomic.Bool
}

// openSwitchesFromEnv returns the settings of openSwitches, in order, or
// the first variable's error.
func openSwitchesFromEnv() ([]bool, error) {
	on := make([]bool, len(openSwitches))
	for i, sw := range openSwitches {
		v, err := switchFromEnv(sw.env, sw.def)
		if err != nil {
			return nil, err
		}
		on[i] = v
	}
	return on, nil
}

// storeOpenSwitches sets openSwitches to on, the settings
// openSwitchesFromEnv returned.
func storeOpenSwitches(on []bool) {
	for i, sw := range openSwitches {
		sw.to.Store(on[i])
	}
}

// EnvNoSideStream names the environment variable that, set to "1" when an
// engine opens, keeps all work on the main stream: weight and bias
// gradients no longer run on the side stream beside the input gradient
// (Device.onSide), as before session 18.
const EnvNoSideStream = "FLEXGEMM_NO_SIDE_STREAM"

// EnvNoBrickGuess names the environment variable that, set to "1" when an
// engine opens, makes the brick search wait for the brick count before it
// sizes its pool (as before session 27) instead of sizing the pool by the
// recent builds' bricks per row (brickRatios.guess) and waiting only after
// the neighbour search is queued.
const EnvNoBrickGuess = "FLEXGEMM_NO_BRICK_GUESS"

// EnvNoBrickFusedScatter names the environment variable that, set to "1"
// when an engine opens, makes the brick search fill its pool by a separate
// pass over the rows (kmap_brick_scatter, as before session 35) where the
// brick insert would fill it (whenever the pool is sized by a guess).
const EnvNoBrickFusedScatter = "FLEXGEMM_NO_BRICK_FUSED_SCATTER"

// EnvNoBrickBallotMask names the environment variable that, set to "1"
// when an engine opens, makes the brick search form each row's tap mask
// from 27 shared-memory reads (kmap_nbr_brick_loop, as before session 38)
// instead of the ballot of the row's table entries as it writes them.
const EnvNoBrickBallotMask = "FLEXGEMM_NO_BRICK_BALLOT_MASK"

// EnvPairsCountFromTable names the environment variable that, set to "1"
// when an engine opens, makes the pair lists' counts read the neighbour
// table (kmap_pairs_count, as before session 70) where the rows' tap masks
// are at hand (kmap_pairs_count_masks: 8 bytes a row instead of 108 for
// 3×3×3 maps).
const EnvPairsCountFromTable = "FLEXGEMM_PAIRS_COUNT_FROM_TABLE"

// EnvNoWaveSort names the environment variable that, set to "1" when an
// engine opens, sorts keys whose tiles would all be resident at once by
// the onesweep sort (up to onesweepMaxTiles tiles) or the classic passes,
// as before session 36, instead of one launch per pass with two grid-wide
// barriers (Device.waveSort).
const EnvNoWaveSort = "FLEXGEMM_NO_WAVE_SORT"

// EnvOccupancyCap names the environment variable that, read when an engine
// opens, caps the resident warps per SM of the kernels whose names begin
// with given prefixes: "prefix[,prefix...]=warps", e.g.
// "spconv_pertap_reduce=40" (the residency of 256-thread blocks at 44
// registers a thread). Such a kernel is launched with enough dynamic shared
// memory that no more of its blocks fit an SM (at least one always does).
// A measurement knob: what fewer resident warps cost a kernel, before its
// registers are given a budget (TestKernelRegisterBudgets in
// cudaext/kernels). Unset or empty: no cap. Cooperative launches and the
// GEMM kernels (spconv_gather_*, spconv_pairs_*: their tiles set their
// residency, and the blocks of some wait for each other, fusesSplitReduce
// and streamK) are never capped.
const EnvOccupancyCap = "FLEXGEMM_OCCUPANCY_CAP"

// occupancyCap is EnvOccupancyCap parsed: the kernels' name prefixes and
// the most warps per SM they may keep resident (0: no cap).
type occupancyCap struct {
	prefixes []string
	warps    int
}

// occupancyCapFromEnv parses EnvOccupancyCap; anything but
// "prefix[,prefix...]=warps" with non-empty prefixes and 1 to 64 warps is
// an error naming the variable.
func occupancyCapFromEnv() (occupancyCap, error) {
	v := os.Getenv(EnvOccupancyCap)
	if v == "" {
		return occupancyCap{}, nil
	}
	bad := func() (occupancyCap, error) {
		return occupancyCap{}, fmt.Errorf("cudaext: %s=%q: want prefix[,prefix...]=warps (1 to 64 warps)", EnvOccupancyCap, v)
	}
	list, count, ok := strings.Cut(v, "=")
	if !ok {
		return bad()
	}
	warps, err := strconv.Atoi(count)
	if err != nil || warps < 1 || warps > 64 {
		return bad()
	}
	c := occupancyCap{warps: warps}
	for p := range strings.SplitSeq(list, ",") {
		if p == "" {
			return bad()
		}
		c.prefixes = append(c.prefixes, p)
	}
	return c, nil
}

// warpsFor returns the cap on kernel name's resident warps per SM, 0 when
// it is not capped (never for the GEMM kernels).
func (c occupancyCap) warpsFor(name string) int {
	if strings.HasPrefix(name, "spconv_gather_") || strings.HasPrefix(name, "spconv_pairs_") {
		return 0
	}
	for _, p := range c.prefixes {
		if strings.HasPrefix(name, p) {
			return c.warps
		}
	}
	return 0
}

// cappedSmem returns the dynamic shared memory with which a kernel of
// staticSmem bytes of static shared memory, launched with threads threads
// and smem bytes of dynamic shared memory a block, keeps at most warps
// warps resident on an SM of smemPerSM bytes (reservedPerBlock of them
// held by the system for every block): smem itself when that already
// holds, else the fewest bytes (in 128-byte units) that leave room for no
// more than max(1, warps / warps a block) blocks.
func cappedSmem(warps, threads, smem, staticSmem, smemPerSM, reservedPerBlock int) int {
	if warps <= 0 || threads <= 0 {
		return smem
	}
	blocks := max(1, warps/((threads+31)/32))
	// (blocks + 1) blocks must not fit: footprint > smemPerSM / (blocks + 1).
	need := smemPerSM/(blocks+1) + 1 - staticSmem - reservedPerBlock
	need = (need + 127) / 128 * 128
	return max(smem, need)
}
