//go:build cudaext

package cudaext

import (
	"flag"
	"fmt"
	"strings"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
)

// EnvHostTests names the environment variable that, set to "1" where
// Open(0) fails (no GPU, or no usable driver), makes TestMain run the
// tests of hostTests — those
// that need no device: the switches' parsing, the fixed tile heuristic and
// the tuner's candidates and ranking, the split and slice rules, the
// mirrors of the C++ parameter structs — against hostEngine instead of
// skipping every test. `-test.run` narrows the list further; without it
// the whole list runs:
//
//	FLEXGEMM_HOST_TESTS=1 go test -tags cudaext ./cudaext
//
// The heuristics then see an H200 (sm_90, 132 SMs, the Hopper kernels of
// every arithmetic loaded, the swapped twins on), as on the GPU machine,
// so a change to a tile rule can be checked where no device is lent.
const EnvHostTests = "FLEXGEMM_HOST_TESTS"

// hostTests are the tests that run without a device (EnvHostTests): each
// either touches no engine or only reads the host-side state hostEngine
// describes (the device's description, the switches). A test added here
// must not launch a kernel, allocate device memory or open a map on the
// device: hostEngine has no context.
var hostTests = []string{
	// Switches and settings read from the environment.
	"TestSwitchesFromEnv", "TestSwappedGathersFromEnv", "TestTilesPerSMFromEnv", "TestRunSortMaxKeysFromEnv",
	"TestRegroupThreadsFromEnv", "TestRegroupMaxRowsFromEnv", "TestRegisterAFromEnv", "TestPerTapMaxBytesFromEnv",
	"TestPerTapGroupRulesFromEnv", "TestPairsWindowRowsFromEnv", "TestPairsOrderGroupsFromEnv", "TestOccupancyCapFromEnv",
	"TestHybridShareFromEnv", "TestHalfSkipFromEnv", "TestCubSortModeFromEnv", "TestBrickMinRowsFromEnv",
	// Tile heuristics, the tuner, split and slice rules.
	"TestDefaultTiles", "TestAutotuneHeuristicMirrorsConv", "TestAutotuneKeys", "TestAutotuneMemo",
	"TestWindowPairsSplits", "TestBalancedPairsSplits", "TestBalancedPairsSplitsPartBytes", "TestPairsTapSlices",
	"TestOrderedSplitsWhere", "TestPairsOrderGroupsFor", "TestTapOfTile", "TestTapFirstTiles", "TestCappedSmem",
	"TestBrickRatiosGuess", "TestSortPlan", "TestPerTapLayout", "TestPerTapGroupsOf",
	// Host-side helpers and mirrors of the C++ structs.
	"TestParamsMirrorCpp", "TestGPUSpatialParamsMirrorCpp", "TestRaColumnIsPermutation", "TestTimelineLines",
	"TestSideLedgerBackward", "TestRoundSize", "TestHalfConversion", "TestBFloat16Conversion", "TestFloatSuffix",
}

// hostEngine returns an engine without a context that describes an H200
// (EnvHostTests): the heuristics read its device's description and the
// switches, which it sets from the environment as Open does.
func hostEngine() (*Engine, error) {
	on, err := openSwitchesFromEnv()
	if err != nil {
		return nil, err
	}
	storeOpenSwitches(on)
	d := &Device{info: DeviceInfo{Name: "host (no device: " + EnvHostTests + ")", Major: 9, SMs: 132}, swapped: true}
	for _, m := range kernels.HopperMaths() {
		d.hopper[m] = true
	}
	return &Engine{d: d}, nil
}

// runHostTests narrows the run to hostTests (and to -test.run's pattern
// within them, which the test binary applies itself): it sets -test.run
// to the list where the command line gave none.
func runHostTests() error {
	if !flag.Parsed() {
		flag.Parse()
	}
	run := flag.Lookup("test.run")
	if run == nil {
		return fmt.Errorf("%s: no -test.run flag", EnvHostTests)
	}
	if run.Value.String() == "" {
		return run.Value.Set("^(" + strings.Join(hostTests, "|") + ")$")
	}
	return nil
}
