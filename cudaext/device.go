//go:build cudaext

package cudaext

import (
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
)

// EnvSync, when set to 1, makes every kernel launch wait for completion
// and report asynchronous faults with the kernel's name (slow; for tests
// and debugging).
const EnvSync = "FLEXGEMM_CUDA_SYNC"

// dim3 is a launch grid or block shape.
type dim3 struct{ X, Y, Z int }

// Device is one GPU with its own context, stream and caching allocator.
//
// A CUDA context is current per OS thread, so every driver call of a
// Device runs inside do, which holds the Device's lock, pins the calling
// goroutine to its thread and makes the context current there: the
// calling goroutine does the work itself (no hand-off to a worker, which
// cost a goroutine wake-up of ~10-20 us per call). Work goes to one
// non-blocking main stream in submission order, so freed memory can be
// reused by later work without synchronisation; only weight and bias
// gradients go to a second, side stream, beside the input gradient that
// follows them (side.go: the main stream waits for the side stream before
// any other call, and blocks freed meanwhile are held until it has).
type Device struct {
	info     DeviceInfo
	syncEach bool

	mu     sync.Mutex // held by do: one caller at a time
	closed atomic.Bool

	pendingMu sync.Mutex
	pending   []func() // releases queued from other goroutines (Free, cleanups)

	// Host waits (HostWaits): written inside do, read anywhere.
	waits, downloads, downloadBytes atomic.Int64

	// State used only inside do ("worker only" below means: under mu).
	cdev cuDevice
	ctx  cuContext
	// stream is where work is queued now: mainStream, or the side
	// stream while onSide queues a section.
	stream, mainStream cuStream
	side               sideStream
	modules            []loadedModule
	// hopper[m]: the Hopper kernels of arithmetic m are loaded (set once
	// by open, read-only afterwards; see hopperTiles).
	hopper   [4]bool
	funcs    map[string]*kernelFunc
	mem      allocator
	args     argStage
	zeroPage devPtr    // 256 zero bytes: a valid address for empty operands
	prof     *profiler // running profile (profile.go), or nil
	noBricks bool      // EnvNoBricks: submanifold maps keep the per-tap hash search
	// longestFirstTilesPerSM, longestFirstTilesPerSMTF32: masked gathers
	// (tf32 ones: the second) of at most this many row tiles per SM launch
	// them longest first (Device.longestFirst; longestFirstTilesPerSM or
	// EnvLongestFirstTilesPerSM, longestFirstTilesPerSMTF32 or
	// EnvLongestFirstTilesPerSMTF32).
	longestFirstTilesPerSM, longestFirstTilesPerSMTF32 int
	// streamKTilesPerSM: split-K gathers of warp-specialised tiles alone
	// on their SM run stream-K from half a tile per SM up to this many
	// (streamKTilesPerSM or EnvStreamKTilesPerSM); streamKBlocks > 0 (the
	// tests) forces it for every such gather, on that many blocks.
	streamKTilesPerSM, streamKBlocks int
	// runSortMax: radixSort sorts up to this many 32-bit keys by runs and
	// a merge (runSortLimit or EnvRunSortMaxKeys).
	runSortMax int64
	// brickMinRows: the brick search builds submanifold maps from this
	// many rows on (brickMinRows or EnvBrickMinRows; the tests lower it).
	brickMinRows int
	// The weight gradient's window split (windowPairsSplits): from
	// pairsWindowMin bytes of operands on (pairsWindowMinBytes), slices of
	// pairsWindowRows rows (pairsWindowRows or EnvPairsWindowRows; the
	// tests lower both), cut at the same output rows in every tap unless
	// noRowSlices (EnvNoRowSlices).
	pairsWindowMin, pairsWindowRows int64
	noRowSlices                     bool
	// noFusedBias (EnvNoFusedBias): ParamGrads never sums the bias
	// gradient in the weight gradient's kernel.
	noFusedBias bool
	// pairsOrderGroups (EnvPairsOrderGroups): the weight gradient's
	// blocks of a submanifold 3×3×3 map in groups of this many splits,
	// long taps first (0: launch order; −1: pairsOrderGroupsFor chooses).
	pairsOrderGroups int64
	// noRowsFirst: masked gathers never launch their tiles in the order
	// of their first rows (rowsFirst; EnvNoRowsFirst); rowsFirstMin: they
	// do from this many rows on (EnvRowsFirstMinRows, default
	// rowsFirstMinRows; the tests lower it).
	noRowsFirst  bool
	rowsFirstMin int64
	// noRegroup: masked orders stay in the Gray order (EnvNoRegroup).
	noRegroup bool
	// regroupMaxRows: the most rows of a table whose masked order is
	// regrouped (kmap.RegroupMaxRows or EnvRegroupMaxRows).
	regroupMaxRows int
	// regroupThreads: the block of the regrouping kernels
	// (regroupThreads or EnvRegroupThreads).
	regroupThreads int
	// noOnesweep: radix sorts run the classic passes (EnvNoOnesweep);
	// noWaveSort: they never run the one-wave passes (EnvNoWaveSort).
	noOnesweep bool
	noWaveSort bool
	// cubSortFrom: which radix sorts run on CUB's agents (EnvCubSort).
	cubSortFrom cubSortMode
	// halfSkip: masked gathers run their tiles' half-skip twins where
	// they have them (EnvHalfSkip); halfSkipLaunches counts those launches
	// (a test instrument).
	halfSkip         bool
	halfSkipLaunches int
	// registerA: tf32 gathers run their tiles' register-A twins where
	// they have them and the gather allows (EnvRegisterA);
	// registerALaunches counts those launches (a test instrument).
	registerA         bool
	registerALaunches int
	// swapped: gathers of 128×64 tiles and of the 256×128 tiles run
	// their tiles' swapped twins where the gather allows
	// (EnvSwappedGathers); swappedLaunches counts
	// those launches (a test instrument).
	swapped         bool
	swappedLaunches int
	// occupancyCap: the kernels launched with padded shared memory so that
	// fewer of their warps stay resident (EnvOccupancyCap; a measurement
	// knob, read into each kernelFunc's capWarps when it is loaded).
	occupancyCap occupancyCap
	// waveBlocks: the one-wave sort's resident blocks per SM, by kernel
	// name (Device.waveTiles).
	waveBlocks map[string]int
	// bricks: the bricks per row of the last brick searches, which size
	// the next one's pool (brickRatios.guess); noBrickGuess: the search
	// waits for the count instead (EnvNoBrickGuess). brickResearches
	// counts the searches repeated because the count exceeded the guess
	// (a test instrument).
	bricks          brickRatios
	noBrickGuess    bool
	brickResearches int
	// noBrickFusedScatter: the brick search's pool is filled by
	// kmap_brick_scatter after the insert even with a guess
	// (EnvNoBrickFusedScatter).
	noBrickFusedScatter bool
	// noBrickBallotMask: the brick search forms the tap masks by a loop
	// of shared-memory reads (EnvNoBrickBallotMask).
	noBrickBallotMask bool
	// pairsFromTable: the pair lists are counted from the neighbour table
	// even where its tap masks are at hand (EnvPairsCountFromTable);
	// maskPairCounts counts the counts taken from masks (a test
	// instrument).
	pairsFromTable bool
	maskPairCounts int
	// reduceVecMin: the split-K reductions sum four elements per thread
	// from this many elements per slice on (reduceVecMinElems; the tests
	// lower it).
	reduceVecMin int64
	// Test instruments: with poisonPartials every split-K partials buffer
	// (gathers and weight gradients) is filled with NaN bytes before its
	// launch, so a slice read but never written shows in the result (the
	// balanced weight-gradient split leaves a tap's unused slices
	// unwritten); lastPairs and lastPairsBK are the parameters and the
	// tile's BK of the last weight-gradient (pairs) launch.
	poisonPartials bool
	lastPairs      pairsParams
	lastPairsBK    int64
	// reduceVecLaunches counts the split-K reductions launched with four
	// elements per thread (reduceVec).
	reduceVecLaunches int
	// splitCtr: the split-K gathers' counters, [splitCounterTiles][2]
	// uint32, zeroed at setup; every launch that uses them leaves them
	// zero (fusesSplitReduce); fusedSplitLaunches counts the split-K
	// gathers that summed their partials in the kernel (a test instrument).
	splitCtr           devPtr
	fusedSplitLaunches int
	// orderedPairs: split weight gradients of 16-bit Hopper tiles add
	// their slices into the float32 result in split order in the kernel
	// (EnvOrderedSplits; Device.orderedSplits says where);
	// orderedSplitLaunches counts them (a test instrument).
	orderedPairs         bool
	orderedSplitLaunches int
	// pdl: kernels that wait for the grids ahead of them are launched
	// with programmatic stream serialization (EnvProgrammaticLaunch,
	// compute capability 9.0 and up; the tests switch it); pdlLaunches
	// counts those launches (a test instrument).
	pdl         bool
	pdlLaunches int
	// perTapMaxBytes: the largest slot buffer of a per-tap gather
	// (pertap.go; EnvPerTapMaxMB, 0: never); perTapLaunches counts the
	// gathers that ran per tap (a test instrument).
	perTapMaxBytes int64
	perTapLaunches int
	// perTapMinBlocks: the fewest blocks of a per-tap gather
	// (perTapMinBlocksPerSM per SM; the tests lower it).
	perTapMinBlocks int64
	// perTapGroupOuts and perTapGroupMinChannels: a forward gather of at
	// least perTapGroupMinChannels input channels may run per tap in
	// groups of tiles whose slot buffer takes up to perTapGroupOuts
	// results (pertap.go; EnvPerTapGroupOuts, EnvPerTapGroupMinChannels;
	// 0 outs: no groups); perTapGroupLaunches counts the gathers that ran
	// in more than one group and perTapLastGroups holds the groups of the
	// last per-tap gather (test instruments).
	perTapGroupOuts, perTapGroupMinChannels int64
	perTapGroupLaunches                     int
	perTapLastGroups                        int64
	// hybridShare: tf32 masked gathers of submanifold maps run hybrid,
	// the taps fewer than this share of a tile's rows hold per tap
	// (hybrid.go; EnvHybridShare, 0: off); hybridLaunches counts the
	// gathers that read hybrid tables, with sparse pairs or none (a test
	// instrument).
	hybridShare    float64
	hybridLaunches int
	// statusHost (page-locked, stWords int32) and statusEv receive a status
	// array without draining the stream (hashCoordsThen); made on first
	// use.
	statusHost unsafe.Pointer
	statusEv   cuEvent
	// segCopies are the free page-locked buffers and events that carry
	// pair lists' segment tables to the host (Device.pairsCount).
	segCopies []*segCopy
}

type loadedModule struct {
	name, source string
	mod          cuModule
	err          error // load failure, reported when one of its kernels is used
}

type kernelFunc struct {
	fn      cuFunction
	smemSet int  // dynamic shared memory limit set so far
	threads int  // max threads per block
	waits   bool // the embedded image's kernel waits for the grids ahead of it (kernels.KernelWaits)
	// capWarps caps the kernel's resident warps per SM (EnvOccupancyCap;
	// 0: no cap); staticSmem is its static shared memory, bytes.
	capWarps, staticSmem int
}

// openDevice creates the context and loads every kernel image.
func openDevice(ordinal int) (*Device, error) {
	minRows, err := brickMinRowsFromEnv()
	if err != nil {
		return nil, err
	}
	perSM, err := longestFirstTilesPerSMFromEnv()
	if err != nil {
		return nil, err
	}
	perSMTF32, err := longestFirstTilesPerSMTF32FromEnv()
	if err != nil {
		return nil, err
	}
	regroupMax, err := regroupMaxRowsFromEnv()
	if err != nil {
		return nil, err
	}
	regroupBlock, err := regroupThreadsFromEnv()
	if err != nil {
		return nil, err
	}
	windowRows, err := pairsWindowRowsFromEnv()
	if err != nil {
		return nil, err
	}
	skPerSM, err := streamKTilesPerSMFromEnv()
	if err != nil {
		return nil, err
	}
	runSortMax, err := runSortMaxKeysFromEnv()
	if err != nil {
		return nil, err
	}
	orderGroups, err := pairsOrderGroupsFromEnv()
	if err != nil {
		return nil, err
	}
	pdl, err := programmaticLaunchFromEnv()
	if err != nil {
		return nil, err
	}
	perTapMax, err := perTapMaxBytesFromEnv()
	if err != nil {
		return nil, err
	}
	groupOuts, err := perTapGroupOutsFromEnv()
	if err != nil {
		return nil, err
	}
	groupMinCh, err := perTapGroupMinChannelsFromEnv()
	if err != nil {
		return nil, err
	}
	hybridShare, err := hybridShareFromEnv()
	if err != nil {
		return nil, err
	}
	rowsFirstMin, err := nonNegativeFromEnv(EnvRowsFirstMinRows, rowsFirstMinRows, "rows")
	if err != nil {
		return nil, err
	}
	cubSortFrom, err := cubSortModeFromEnv()
	if err != nil {
		return nil, err
	}
	halfSkip, err := halfSkipFromEnv()
	if err != nil {
		return nil, err
	}
	occCap, err := occupancyCapFromEnv()
	if err != nil {
		return nil, err
	}
	registerA, err := registerAFromEnv()
	if err != nil {
		return nil, err
	}
	swapped, err := swappedGathersFromEnv()
	if err != nil {
		return nil, err
	}
	orderedPairs, err := orderedSplitsFromEnv()
	if err != nil {
		return nil, err
	}
	d := &Device{
		cubSortFrom:                cubSortFrom,
		halfSkip:                   halfSkip,
		registerA:                  registerA,
		swapped:                    swapped,
		orderedPairs:               orderedPairs,
		occupancyCap:               occCap,
		pdl:                        pdl,
		perTapMaxBytes:             perTapMax,
		perTapGroupOuts:            groupOuts,
		perTapGroupMinChannels:     groupMinCh,
		hybridShare:                hybridShare,
		funcs:                      map[string]*kernelFunc{},
		syncEach:                   os.Getenv(EnvSync) == "1",
		noBricks:                   os.Getenv(EnvNoBricks) == "1",
		longestFirstTilesPerSM:     perSM,
		longestFirstTilesPerSMTF32: perSMTF32,
		streamKTilesPerSM:          skPerSM,
		runSortMax:                 int64(runSortMax),
		brickMinRows:               minRows,
		pairsWindowMin:             pairsWindowMinBytes,
		pairsWindowRows:            windowRows,
		noRowSlices:                os.Getenv(EnvNoRowSlices) == "1",
		noFusedBias:                os.Getenv(EnvNoFusedBias) == "1",
		pairsOrderGroups:           orderGroups,
		noRowsFirst:                os.Getenv(EnvNoRowsFirst) == "1",
		rowsFirstMin:               int64(rowsFirstMin),
		noRegroup:                  os.Getenv(EnvNoRegroup) == "1",
		regroupMaxRows:             regroupMax,
		regroupThreads:             regroupBlock,
		noOnesweep:                 os.Getenv(EnvNoOnesweep) == "1",
		noWaveSort:                 os.Getenv(EnvNoWaveSort) == "1",
		noBrickGuess:               os.Getenv(EnvNoBrickGuess) == "1",
		noBrickFusedScatter:        os.Getenv(EnvNoBrickFusedScatter) == "1",
		noBrickBallotMask:          os.Getenv(EnvNoBrickBallotMask) == "1",
		pairsFromTable:             os.Getenv(EnvPairsCountFromTable) == "1",
	}
	d.mem.free = map[int64][]devPtr{}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.setup(ordinal); err != nil {
		d.teardown()
		return nil, err
	}
	d.reduceVecMin = reduceVecMinElems(d.info.SMs)
	d.perTapMinBlocks = perTapMinBlocksPerSM * int64(d.info.SMs)
	return d, nil
}

// run executes f, turning a panic into an error (the lock is released and
// the device stays usable).
func (d *Device) run(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cudaext: panic inside a device call: %v", r)
		}
	}()
	return f()
}

func (d *Device) setup(ordinal int) error {
	if err := driverInit(); err != nil {
		return fmt.Errorf("%w: the CUDA driver did not initialise (%v); is an NVIDIA GPU with its driver present?", ErrNoDevice, err)
	}
	n, err := deviceCount()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoDevice, err)
	}
	if ordinal < 0 || ordinal >= n {
		return fmt.Errorf("%w: ordinal %d, but %d device(s) present", ErrNoDevice, ordinal, n)
	}
	dev, info, err := deviceProps(ordinal)
	if err != nil {
		return err
	}
	if info.Major < 8 {
		return fmt.Errorf("%w: %s has compute capability %d.%d; the kernels need 8.0 or newer", ErrNoDevice, info.Name, info.Major, info.Minor)
	}
	d.cdev, d.info = dev, info
	d.pdl = d.pdl && info.Major >= 9
	if d.ctx, err = primaryCtxRetain(dev); err != nil {
		return err
	}
	if err := ctxSetCurrent(d.ctx); err != nil {
		return err
	}
	if d.stream, err = streamCreate(); err != nil {
		return err
	}
	d.mainStream = d.stream
	if err := d.openSide(); err != nil {
		return err
	}
	if d.args, err = newArgStage(); err != nil {
		return err
	}
	images, err := kernels.Images()
	if err != nil {
		return err
	}
	for _, im := range images {
		// A module that fails to load (a broken experimental image) only
		// fails the kernels it holds. The Hopper modules (sm_90a cubins,
		// kernels.Images) are loaded on compute capability 9.0 only.
		if strings.HasSuffix(im.Name, "_sm90a") && !(info.Major == 9 && info.Minor == 0) {
			d.modules = append(d.modules, loadedModule{name: im.Name, source: im.Source,
				err: fmt.Errorf("cudaext: kernel module %q holds sm_90a (Hopper) kernels; %s is sm_%d%d", im.Name, info.Name, info.Major, info.Minor)})
			continue
		}
		mod, err := moduleLoad(im.Data)
		if err != nil {
			err = fmt.Errorf("cudaext: loading kernel module %q (%s): %w", im.Name, im.Source, err)
		}
		d.modules = append(d.modules, loadedModule{name: im.Name, source: im.Source, mod: mod, err: err})
	}
	for _, m := range kernels.Maths {
		name := strings.TrimSuffix(kernels.HopperInstanceFile(m), ".cu")
		for _, mod := range d.modules {
			if mod.name == name {
				d.hopper[m] = mod.err == nil
			}
		}
	}
	if d.zeroPage, _, err = d.allocRaw(256); err != nil {
		return err
	}
	if err := memsetD8(d.zeroPage, 0, 256, d.stream); err != nil {
		return err
	}
	// The split-K gathers' counters.
	if d.splitCtr, _, err = d.allocRaw(8 * splitCounterTiles); err != nil {
		return err
	}
	if err := memsetD8(d.splitCtr, 0, 8*splitCounterTiles, d.stream); err != nil {
		return err
	}
	return streamSync(d.stream)
}

// teardown releases everything the context owns; errors are ignored since
// the context goes away anyway.
func (d *Device) teardown() {
	if d.ctx == nil {
		return
	}
	if d.stream != nil {
		_ = d.syncAll()
	}
	d.drainPending()
	d.flushCache()
	for _, m := range d.modules {
		if m.err == nil {
			printTimeline(m.mod, d.stream)
			_ = moduleUnload(m.mod)
		}
	}
	d.modules = nil
	if d.statusHost != nil {
		_ = memFreeHost(d.statusHost)
		_ = eventDestroy(d.statusEv)
		d.statusHost = nil
	}
	for _, c := range d.segCopies {
		_ = memFreeHost(c.host)
		_ = eventDestroy(c.ev)
	}
	d.segCopies = nil
	d.closeSide()
	if d.mainStream != nil {
		_ = streamDestroy(d.mainStream)
	}
	d.args.free()
	_ = primaryCtxRelease(d.cdev)
	d.ctx = nil
}

// do runs f with the device's context current, one call at a time, on the
// calling goroutine (pinned to its OS thread for the call), and returns
// its error; releases queued by later run first, then the main stream is
// made to wait for the side stream's work (joinSide), so f sees every
// result queued before. f must not call do itself.
func (d *Device) do(f func() error) error {
	return d.doJoining(f, d.joinSide)
}

// doBeside is do for a call that reads no result of the side stream's
// pending work and frees nothing it uses (an input gradient): the main
// stream waits only for the sections before the previous such call
// (besideSide), so f runs beside the latest ones.
func (d *Device) doBeside(f func() error) error {
	return d.doJoining(f, d.besideSide)
}

func (d *Device) doJoining(f func() error, join func() error) error {
	if d.closed.Load() {
		return ErrClosed
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return ErrClosed
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := ctxSetCurrent(d.ctx); err != nil {
		return err
	}
	d.drainPending()
	if err := join(); err != nil {
		return err
	}
	return d.run(f)
}

// close releases the context after the work already submitted.
func (d *Device) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Swap(true) {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if ctxSetCurrent(d.ctx) == nil {
		d.teardown()
	}
}

// later queues f to run inside the next do, before its work. It is safe
// from any goroutine (used by Free and GC cleanups).
func (d *Device) later(f func()) {
	if d.closed.Load() {
		return
	}
	d.pendingMu.Lock()
	d.pending = append(d.pending, f)
	d.pendingMu.Unlock()
}

func (d *Device) drainPending() {
	d.pendingMu.Lock()
	p := d.pending
	d.pending = nil
	d.pendingMu.Unlock()
	for _, f := range p {
		f()
	}
}

// hopperTiles reports whether the Hopper kernels of arithmetic m
// (kernels.HopperTiles) are loaded: a compute capability 9.0 device whose
// driver compiled their sm_90a PTX. Decided once when the device opens
// (every convolution asks, through the tile heuristic); safe from any
// goroutine.
func (d *Device) hopperTiles(m kernels.Math) bool { return d.hopper[m] }

// function returns the kernel named name from the loaded modules.
func (d *Device) function(name string) (*kernelFunc, error) {
	if k, ok := d.funcs[name]; ok {
		return k, nil
	}
	// The manifest says which module defines the kernel; look there first
	// (a miss elsewhere is a driver API error that tools report), then in
	// every module (overridden images may move kernels).
	mods := d.modules
	if home, ok := kernels.KernelModule(name); ok {
		for i, m := range d.modules {
			if m.name == home {
				mods = append([]loadedModule{m}, append(append([]loadedModule{}, d.modules[:i]...), d.modules[i+1:]...)...)
				break
			}
		}
	}
	for _, m := range mods {
		if m.err != nil {
			if home, ok := kernels.KernelModule(name); ok && home == m.name {
				return nil, fmt.Errorf("%w: %s: %v", ErrLaunch, name, m.err)
			}
			continue
		}
		f, ok, err := moduleFunction(m.mod, name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrLaunch, name, err)
		}
		if ok {
			k := &kernelFunc{fn: f, threads: funcMaxThreads(f),
				waits:    m.source == "embedded" && kernels.KernelWaits(m.name, name),
				capWarps: d.occupancyCap.warpsFor(name), staticSmem: funcStaticSmem(f)}
			d.funcs[name] = k
			return k, nil
		}
	}
	names := make([]string, len(d.modules))
	for i, m := range d.modules {
		names[i] = m.name
	}
	return nil, fmt.Errorf("%w: kernel %q is in none of the modules %v (stale kernel images? run cudaext/kernels/build.sh)", ErrLaunch, name, names)
}

// launch starts kernel name on the device stream. args are the kernel's
// parameters in order: devPtr, *Buffer (its address, 0 for nil), int,
// int64, uint64 (8 bytes), int32, uint32, float32 (4 bytes), or a
// structArg (its bytes, for structs passed by value). Worker only.
func (d *Device) launch(name string, grid, block dim3, smem int, args ...any) error {
	return d.launchAs(false, name, grid, block, smem, args...)
}

// launchCooperative is launch for a kernel whose blocks wait for each
// other (grid-wide barriers): a cooperative grid, every block resident at
// once, or an error wrapping the driver's
// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE (isCoopTooBig) with nothing
// queued. Never a programmatic launch.
func (d *Device) launchCooperative(name string, grid, block dim3, smem int, args ...any) error {
	return d.launchAs(true, name, grid, block, smem, args...)
}

// allowDynamicSmem raises kernel name's opt-in dynamic shared-memory
// limit to smem bytes where its static and dynamic shared memory together
// pass the default 48 KiB and no earlier launch raised it that far; an
// error names the kernel when the device cannot give that much.
func (d *Device) allowDynamicSmem(name string, k *kernelFunc, smem int) error {
	if smem+k.staticSmem <= 48*1024 || smem <= k.smemSet {
		return nil
	}
	if smem+k.staticSmem > d.info.MaxSmemBlock {
		return fmt.Errorf("%w: %s: needs %d bytes of shared memory (%d static), %s allows %d", ErrLaunch, name, smem+k.staticSmem, k.staticSmem, d.info.Name, d.info.MaxSmemBlock)
	}
	if err := funcSetMaxDynamicSmem(k.fn, smem); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrLaunch, name, err)
	}
	k.smemSet = smem
	return nil
}

// isCoopTooBig reports whether err is a cooperative launch refused for
// more blocks than the GPU holds at once.
func isCoopTooBig(err error) bool {
	var de *DriverError
	return errors.As(err, &de) && de.Code == cuErrCoopTooBig
}

// launchAs is launch, cooperative with coop.
func (d *Device) launchAs(coop bool, name string, grid, block dim3, smem int, args ...any) error {
	k, err := d.function(name)
	if err != nil {
		return err
	}
	if grid.Y == 0 {
		grid.Y = 1
	}
	if grid.Z == 0 {
		grid.Z = 1
	}
	if block.Y == 0 {
		block.Y = 1
	}
	if block.Z == 0 {
		block.Z = 1
	}
	if grid.X <= 0 || grid.X > 1<<31-1 || grid.Y > 65535 || grid.Z > 65535 {
		return fmt.Errorf("%w: %s: grid %v out of range", ErrLaunch, name, grid)
	}
	threads := block.X * block.Y * block.Z
	if threads <= 0 || threads > k.threads {
		return fmt.Errorf("%w: %s: %d threads per block, kernel allows %d", ErrLaunch, name, threads, k.threads)
	}
	if k.capWarps > 0 && !coop {
		smem = cappedSmem(k.capWarps, threads, smem, k.staticSmem, d.info.SmemPerSM, d.info.SmemReserved)
	}
	if err := d.allowDynamicSmem(name, k, smem); err != nil {
		return err
	}
	params, err := d.args.stage(args)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrLaunch, name, err)
	}
	ev, err := d.profLaunchBegin()
	if err != nil {
		return fmt.Errorf("%w: %s: profiling: %v", ErrLaunch, name, err)
	}
	// Programmatic launches where the kernel waits for the one ahead of
	// it, except while profiling (events between the launches time each
	// kernel alone).
	pdl := !coop && d.pdl && k.waits && d.prof == nil
	if pdl {
		d.pdlLaunches++
	}
	if err := launchKernel(k.fn, grid, block, smem, d.stream, params, pdl, coop); err != nil {
		if ev != nil {
			d.prof.spare = append(d.prof.spare, *ev)
		}
		return fmt.Errorf("%w: %s grid %v block %v smem %d: %w", ErrLaunch, name, grid, block, smem, err)
	}
	if err := d.profLaunchEnd(ev, name); err != nil {
		return fmt.Errorf("%w: %s: profiling: %v", ErrLaunch, name, err)
	}
	if d.syncEach {
		// The debugging wait of FLEXGEMM_CUDA_SYNC is not one of the
		// engine's host waits: HostWaits counts only what normal runs do.
		if err := streamSync(d.stream); err != nil {
			return fmt.Errorf("%w: %s grid %v block %v: %v", ErrLaunch, name, grid, block, err)
		}
	}
	return nil
}

// sync waits for all work queued on the device stream (a counted host
// wait, see HostWaits). Worker only.
func (d *Device) sync() error {
	d.waits.Add(1)
	return streamSync(d.stream)
}

// copyToHost copies bytes from device memory at src to host memory at dst
// and waits for the copy: a counted host wait and download (HostWaits).
// Every device → host copy of the engine goes through here. Worker only.
func (d *Device) copyToHost(dst unsafe.Pointer, src devPtr, bytes int64) error {
	if bytes == 0 {
		return nil
	}
	d.countDownload(bytes)
	return memcpyDtoH(dst, src, bytes, d.stream)
}

// countDownload counts a device → host copy of bytes that the host waits
// for (HostWaits): copyToHost's, or one queued asynchronously and waited
// for by an event (queueStatusCopy).
func (d *Device) countDownload(bytes int64) {
	d.waits.Add(1)
	d.downloads.Add(1)
	d.downloadBytes.Add(bytes)
}

// structArg is a kernel parameter passed by value as raw bytes.
type structArg interface{ argBytes() []byte }

// argStage holds C memory for kernel parameters (kernelParams of
// cuLaunchKernel must point at C memory). Worker only, reused per launch.
type argStage struct {
	buf  unsafe.Pointer
	ptrs unsafe.Pointer
}

const (
	argBufBytes = 4096
	argMax      = 64
)

func newArgStage() (argStage, error) {
	a := argStage{buf: cMalloc(argBufBytes), ptrs: cMalloc(argMax * int(unsafe.Sizeof(uintptr(0))))}
	if a.buf == nil || a.ptrs == nil {
		a.free()
		return argStage{}, errors.New("cudaext: out of host memory for kernel arguments")
	}
	return a, nil
}

func (a *argStage) free() {
	if a.buf != nil {
		cFree(a.buf)
	}
	if a.ptrs != nil {
		cFree(a.ptrs)
	}
	a.buf, a.ptrs = nil, nil
}

func (a *argStage) stage(args []any) (unsafe.Pointer, error) {
	if len(args) > argMax {
		return nil, fmt.Errorf("%d kernel arguments, at most %d", len(args), argMax)
	}
	buf := unsafe.Slice((*byte)(a.buf), argBufBytes)
	ptrs := unsafe.Slice((*unsafe.Pointer)(a.ptrs), argMax)
	off := 0
	put := func(i int, b []byte) error {
		off = (off + 7) &^ 7
		if off+len(b) > argBufBytes {
			return fmt.Errorf("kernel arguments exceed %d bytes", argBufBytes)
		}
		copy(buf[off:], b)
		ptrs[i] = unsafe.Add(a.buf, off)
		off += len(b)
		return nil
	}
	for i, x := range args {
		var err error
		switch v := x.(type) {
		case devPtr:
			err = put(i, le64(uint64(v)))
		case *Buffer:
			var p uint64
			if v != nil {
				p = uint64(v.ptr)
			}
			err = put(i, le64(p))
		case int:
			err = put(i, le64(uint64(int64(v))))
		case int64:
			err = put(i, le64(uint64(v)))
		case uint64:
			err = put(i, le64(v))
		case int32:
			err = put(i, le32(uint32(v)))
		case uint32:
			err = put(i, le32(v))
		case float32:
			err = put(i, le32(math.Float32bits(v)))
		case float64:
			err = put(i, le64(math.Float64bits(v)))
		case structArg:
			err = put(i, v.argBytes())
		default:
			err = fmt.Errorf("argument %d has unsupported type %T", i, x)
		}
		if err != nil {
			return nil, err
		}
	}
	return a.ptrs, nil
}

func le64(v uint64) []byte {
	return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), byte(v >> 32), byte(v >> 40), byte(v >> 48), byte(v >> 56)}
}

func le32(v uint32) []byte { return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)} }

// elementwise returns a grid-stride launch shape for n elements.
func (d *Device) elementwise(n int64) (grid, block dim3) {
	const threads = 256
	blocks := (n + threads - 1) / threads
	if lim := int64(d.info.SMs) * 32; blocks > lim {
		blocks = lim
	}
	if blocks < 1 {
		blocks = 1
	}
	return dim3{X: int(blocks)}, dim3{X: threads}
}
