//go:build cudaext

package cudaext

// Autotuning of sparse.Auto convolutions.
//
// When a convolution asks for sparse.Auto and leaves the tile, the tile
// rows and the split-K factor to the engine, the engine names the problem
// by an autotune.Key (device; op "conv_<kind>" plus "_s<stride>" for maps
// that are not submanifold; direction; dtype and TF32 flag; V; Ci; Co; the
// ⌊log2 N⌋ bucket of the rows) and asks an autotune.Tuner. A cached or
// pre-tuned choice is used at once. On a miss (mode on) every candidate
// (algorithm × tile × split-K factor, convCandidates) is launched on the
// caller's own inputs into scratch outputs and timed with CUDA events, the
// current heuristic's pick first and the rest in heuristic order, until
// the budget (2 s by default) is spent; the fastest is stored and run.
// Modes off and cache-only (on a miss) never measure: they run exactly the
// fixed heuristic of conv.go (masked implicit split-K, chooseTile,
// chooseSplits), so their results are those of a build without a tuner.

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/flexgemm-go/flexgemm/autotune"
	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// Directions as conv.go passes them to tuned (so that conv.go needs no
// import of package autotune).
const (
	tuneFwd   = autotune.Fwd
	tuneDGrad = autotune.DGrad
	tuneWGrad = autotune.WGrad
)

// tuneSplits are the split-K factors offered to the tuner for the split-K
// algorithms of the gather family (forward, input gradient), and
// tunePairsSplits those of the weight gradient, whose heuristic
// (choosePairsSplits) goes up to pairsMaxSplits = 64. Factor 1 is not
// offered: a split-K algorithm with one split runs exactly the kernel of
// its plain algorithm, which is a candidate of its own.
var (
	tuneSplits      = []int{2, 4, 8, 16}
	tunePairsSplits = []int{2, 4, 8, 16, 32, 64}
)

// splitsFor returns the split-K factors offered for a direction.
func splitsFor(dir autotune.Direction) []int {
	if dir == autotune.WGrad {
		return tunePairsSplits
	}
	return tuneSplits
}

// AutotuneStats counts the decisions of an engine's autotuner since it was
// opened or last replaced by SetAutotune.
type AutotuneStats struct {
	// Decisions is the number of Auto convolutions the tuner decided.
	Decisions int64
	// CacheHits and PretunedHits count decisions taken from the user's
	// cache (file or this process) and from the embedded pre-tuned table.
	CacheHits, PretunedHits int64
	// Tuned counts keys measured (cold shapes).
	Tuned int64
	// Heuristic counts decisions left to the fixed heuristic (mode off, or
	// a miss in mode cache-only).
	Heuristic int64
	// Launches counts candidate launches made while measuring (warm-up and
	// timed), Failures the candidates that returned an error.
	Launches, Failures int64
	// TuneTime is the wall time spent measuring.
	TuneTime time.Duration
}

// tuneRecord is one decision, kept for tests and diagnostics.
type tuneRecord struct {
	key    autotune.Key
	result autotune.Result
}

// tuneState is the autotuner of one engine: the cache it reads and writes,
// the tuner, and counters. It lives outside Engine (in tuneStates) and is
// opened on the first Auto convolution.
type tuneState struct {
	mu    sync.Mutex
	cache *autotune.Cache
	tuner *autotune.Tuner
	last  tuneRecord
	// memo holds the Auto decision per key once made: a convolution whose
	// key was decided before costs two map lookups (the memo and the
	// cache's entry), not the candidate list and the tuner (tens of
	// microseconds of host time per call, most of a small layer's time).
	// A decision holds while the cache's entry for its key is the one it
	// was taken with, so a choice stored into the engine's cache later
	// (AutotuneCache().Store, Reload) is used by the next call. Reset with
	// the tuner; keys retuned into the engine's cache by TuneGrid are
	// dropped.
	memo map[autotune.Key]memoEntry

	decisions, cacheHits, pretunedHits, tuned, heuristic atomic.Int64
	launches, failures, tuneNanos                        atomic.Int64
}

var (
	tuneMu     sync.Mutex
	tuneStates = map[weak.Pointer[Engine]]*tuneState{}
)

// autotuneState returns e's tuner state, creating it on first use. The
// entry is dropped when the engine is garbage collected.
func (e *Engine) autotuneState() *tuneState {
	k := weak.Make(e)
	tuneMu.Lock()
	defer tuneMu.Unlock()
	if s := tuneStates[k]; s != nil {
		return s
	}
	s := &tuneState{}
	tuneStates[k] = s
	runtime.AddCleanup(e, func(k weak.Pointer[Engine]) {
		tuneMu.Lock()
		delete(tuneStates, k)
		tuneMu.Unlock()
	}, k)
	return s
}

// get returns the tuner and its cache, opening them on first use: the mode
// comes from $FLEXGEMM_AUTOTUNE and the cache file from
// autotune.DefaultPath; in mode off no file is read or written. An unknown
// mode is an error (reported again on every call until fixed).
func (s *tuneState) get() (*autotune.Tuner, *autotune.Cache, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tuner != nil {
		return s.tuner, s.cache, nil
	}
	mode, err := autotune.ModeFromEnv()
	if err != nil {
		return nil, nil, fmt.Errorf("cudaext: autotuner: %w", err)
	}
	var opts []autotune.Option
	if mode == autotune.Off {
		opts = append(opts, autotune.InMemory())
	}
	cache, err := autotune.Open(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("cudaext: autotuner: %w", err)
	}
	tuner, err := autotune.NewTuner(cache, autotune.WithMode(mode), autotune.WithHeuristic(convHeuristic))
	if err != nil {
		return nil, nil, fmt.Errorf("cudaext: autotuner: %w", err)
	}
	s.cache, s.tuner = cache, tuner
	return tuner, cache, nil
}

// set replaces the cache and tuner and zeroes the counters.
func (s *tuneState) set(c *autotune.Cache, t *autotune.Tuner) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache, s.tuner, s.last, s.memo = c, t, tuneRecord{}, nil
	for _, a := range []*atomic.Int64{&s.decisions, &s.cacheHits, &s.pretunedHits, &s.tuned, &s.heuristic, &s.launches, &s.failures, &s.tuneNanos} {
		a.Store(0)
	}
}

// record counts one decision.
func (s *tuneState) record(k autotune.Key, r autotune.Result) {
	s.decisions.Add(1)
	switch r.Source {
	case autotune.FromCache:
		s.cacheHits.Add(1)
	case autotune.FromPretuned:
		s.pretunedHits.Add(1)
	case autotune.FromMeasurement:
		s.tuned.Add(1)
	case autotune.FromHeuristic:
		s.heuristic.Add(1)
	}
	s.failures.Add(int64(len(r.Failures)))
	s.mu.Lock()
	s.last = tuneRecord{key: k, result: r}
	s.mu.Unlock()
}

// memoEntry is a remembered decision and the cache's entry for its key
// when it was taken (found false: none), which it stays valid with.
type memoEntry struct {
	r     autotune.Result
	entry cacheEntry
}

// cacheEntry is the answer of Cache.Lookup.
type cacheEntry struct {
	choice autotune.Choice
	src    autotune.Source
	found  bool
}

// entryFor returns the cache's entry for k; mode off reads no cache (its
// decisions never depend on one) and gets the zero entry.
func (s *tuneState) entryFor(k autotune.Key, tuner *autotune.Tuner, cache *autotune.Cache) cacheEntry {
	if tuner == nil || cache == nil || tuner.Mode() == autotune.Off {
		return cacheEntry{}
	}
	ch, src, ok := cache.Lookup(k)
	return cacheEntry{ch, src, ok}
}

// memoized returns the decision made for k, if any and if the cache's
// entry for k is still the one it was taken with.
func (s *tuneState) memoized(k autotune.Key) (autotune.Result, bool) {
	s.mu.Lock()
	m, ok := s.memo[k]
	tuner, cache := s.tuner, s.cache
	s.mu.Unlock()
	if !ok || s.entryFor(k, tuner, cache) != m.entry {
		return autotune.Result{}, false
	}
	return m.r, true
}

// memoize keeps r, just decided through tuner over cache, as the decision
// for k, with the cache's entry for k as it is now (after the tuner's
// store of a measured choice).
func (s *tuneState) memoize(k autotune.Key, r autotune.Result, tuner *autotune.Tuner, cache *autotune.Cache) {
	e := s.entryFor(k, tuner, cache)
	if r.Source != autotune.FromHeuristic && tuner.Mode() != autotune.Off && e.choice.Candidate != r.Choice.Candidate {
		return // the entry changed since the decision: decide again next time
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tuner != tuner || s.cache != cache {
		return // replaced meanwhile (SetAutotune)
	}
	if s.memo == nil {
		s.memo = map[autotune.Key]memoEntry{}
	}
	s.memo[k] = memoEntry{r: r, entry: e}
}

// forget drops the decision for k.
func (s *tuneState) forget(k autotune.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.memo, k)
}

func (s *tuneState) lastRecord() tuneRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// SetAutotune replaces the engine's autotuner: Auto convolutions are
// decided by a tuner over cache built with opts (autotune.WithMode,
// WithBudget, WithRepeats, …; without WithMode the mode comes from
// $FLEXGEMM_AUTOTUNE). The default, set up on the first Auto convolution,
// is autotune.Open() (the user's cache file at autotune.DefaultPath, over
// the embedded pre-tuned tables) with the mode from the environment and a
// 2 s budget per untuned shape.
//
// Which candidates are tried: every algorithm (for the weight gradient the
// masked algorithms run the same kernels as the unmasked ones and are not
// offered) × every tile of kernels.Tiles that compiles for the arithmetic
// (the Narrow tiles: float16 and bfloat16 only) and fits the device × the
// split-K factors 2, 4, 8, 16 for the split-K algorithms (weight gradient:
// up to 64, as its heuristic), pruned where the shape makes a candidate
// pointless (tiles much wider or taller than the output, more splits than
// reduction steps, splitting an already multi-wave grid, weight-gradient
// partials over the engine's bound, an im2col matrix over an eighth of the
// device memory). Candidates are timed on the caller's own inputs into
// scratch outputs (never the caller's result), with CUDA events, and the
// device is synchronised only while measuring. Tuning applies only when
// ConvOptions.Algorithm is Auto and Tile, TileRows and SplitK are all
// left to the engine; any of them set selects the fixed heuristic.
//
// All candidates compute the same convolution; they differ only in
// rounding (split-K sums float32 partials in split order). The choice is
// cached, so every later call of the same key runs the same kernel and
// gives the same bits; modes off and cache-only never measure.
func (e *Engine) SetAutotune(cache *autotune.Cache, opts ...autotune.TunerOption) error {
	if cache == nil {
		return errors.New("cudaext: SetAutotune: nil cache (use autotune.Open(autotune.InMemory()) for none)")
	}
	t, err := autotune.NewTuner(cache, append([]autotune.TunerOption{autotune.WithHeuristic(convHeuristic)}, opts...)...)
	if err != nil {
		return fmt.Errorf("cudaext: SetAutotune: %w", err)
	}
	e.autotuneState().set(cache, t)
	return nil
}

// resetAutotune drops the tuner so that the next Auto convolution opens
// the default one again (tests).
func (e *Engine) resetAutotune() { e.autotuneState().set(nil, nil) }

// AutotuneCache returns the cache the engine's autotuner reads and writes,
// opening the default one if no Auto convolution has run yet (see
// SetAutotune). Its WriteTable exports measured choices as a pre-tuned
// table.
func (e *Engine) AutotuneCache() (*autotune.Cache, error) {
	_, c, err := e.autotuneState().get()
	return c, err
}

// AutotuneStats returns the counters of the engine's autotuner.
func (e *Engine) AutotuneStats() AutotuneStats {
	s := e.autotuneState()
	return AutotuneStats{
		Decisions: s.decisions.Load(), CacheHits: s.cacheHits.Load(), PretunedHits: s.pretunedHits.Load(),
		Tuned: s.tuned.Load(), Heuristic: s.heuristic.Load(), Launches: s.launches.Load(),
		Failures: s.failures.Load(), TuneTime: time.Duration(s.tuneNanos.Load()),
	}
}

// AutotuneChoice reports, without measuring anything, the kernel an Auto
// convolution of this problem runs now: the cached or pre-tuned candidate
// and its source. ok is false when the fixed heuristic applies (not tuned
// yet in mode on or cache-only, mode off, or nothing to compute). dt is
// the features' dtype; float32 problems use the engine's TF32 setting.
// Benchmarks use it to record which algorithm Auto ran.
func (e *Engine) AutotuneChoice(dir autotune.Direction, m *kmap.Map, dt sparse.DType, ci, co int) (c autotune.Candidate, src autotune.Source, ok bool) {
	if m == nil {
		return c, src, false
	}
	mth, err := e.mathFor(dt)
	if err != nil {
		return c, src, false
	}
	k, ok := e.convKey(dir, m, mth, int64(ci), int64(co))
	if !ok {
		return c, src, false
	}
	tuner, cache, err := e.autotuneState().get()
	if err != nil || tuner.Mode() == autotune.Off {
		return c, src, false
	}
	ch, src, ok := cache.Lookup(k)
	if !ok || !slices.Contains(convCandidates(k, e.tuneLimits()), ch.Candidate) {
		return c, src, false
	}
	return ch.Candidate, src, true
}

// AutotuneDevice returns the device identity under which the engine's
// choices are cached.
func (e *Engine) AutotuneDevice() autotune.Device {
	i := e.d.info
	return autotune.Device{Name: i.Name, SMs: i.SMs, Major: i.Major, Minor: i.Minor}
}

// convOpName names the operation of a map for autotune.Key.Op:
// "conv_submanifold", or "conv_<kind>_s<stride>" ("conv_strided_s2",
// "conv_transposed_s2", "conv_inverse_s1_2_2" for an anisotropic stride),
// since the key has no stride field.
func convOpName(m *kmap.Map) string {
	if m.Kind == kmap.Submanifold {
		return "conv_submanifold"
	}
	s := m.Conv.Stride
	st := strconv.Itoa(s[0])
	if s[1] != s[0] || s[2] != s[0] {
		st = fmt.Sprintf("%d_%d_%d", s[0], s[1], s[2])
	}
	return "conv_" + m.Kind.String() + "_s" + st
}

// keyDType returns the autotune dtype name and TF32 flag of an arithmetic.
func keyDType(m kernels.Math) (string, bool) {
	switch m {
	case kernels.TF32:
		return "fp32", true
	case kernels.F16:
		return "fp16", false
	case kernels.BF16:
		return "bf16", false
	}
	return "fp32", false
}

// keyMath is the inverse of keyDType.
func keyMath(k autotune.Key) (kernels.Math, bool) {
	switch {
	case k.DType == "fp32" && k.TF32:
		return kernels.TF32, true
	case k.DType == "fp32":
		return kernels.F32, true
	case k.DType == "fp16":
		return kernels.F16, true
	case k.DType == "bf16":
		return kernels.BF16, true
	}
	return 0, false
}

// convKey names one convolution call. The row count of the bucket is the
// output rows of the GEMM for the forward pass (NOut) and the input
// gradient (NIn), and NOut (the rows reduced over) for the weight
// gradient. ok is false for a problem with nothing to tune (no rows or no
// channels).
func (e *Engine) convKey(dir autotune.Direction, m *kmap.Map, mth kernels.Math, ci, co int64) (autotune.Key, bool) {
	rows := m.NOut
	if dir == autotune.DGrad {
		rows = m.NIn
	}
	if rows <= 0 || ci <= 0 || co <= 0 || m.V() <= 0 {
		return autotune.Key{}, false
	}
	dt, tf32 := keyDType(mth)
	return autotune.Key{
		Device: e.AutotuneDevice(), Op: convOpName(m), Dir: dir, DType: dt, TF32: tf32,
		V: m.V(), Ci: int(ci), Co: int(co), LogN: autotune.Bucket(rows),
	}, true
}

// tuneLimits are the device limits that prune candidates.
type tuneLimits struct {
	maxSmem  int   // dynamic shared memory per block, bytes (0: unknown)
	totalMem int64 // device memory, bytes (0: unknown)
	// hopper[m]: the Hopper gather tiles of arithmetic m are loaded and
	// offered (candidates, and the heuristic as the engine's defaults).
	hopper [4]bool
}

func (e *Engine) tuneLimits() tuneLimits {
	lim := tuneLimits{maxSmem: e.d.info.MaxSmemBlock, totalMem: e.d.info.TotalMem}
	for _, m := range kernels.Maths {
		lim.hopper[m] = e.hopperDefaults(m)
	}
	return lim
}

// algorithmsFor lists the algorithms offered for a direction, the
// heuristic's split-K algorithm first and its plain twin second.
func algorithmsFor(dir autotune.Direction) []sparse.Algorithm {
	if dir == autotune.WGrad {
		return []sparse.Algorithm{sparse.ImplicitSplitK, sparse.Implicit, sparse.Explicit}
	}
	return []sparse.Algorithm{sparse.MaskedImplicitSplitK, sparse.MaskedImplicit, sparse.ImplicitSplitK, sparse.Implicit, sparse.Explicit}
}

// gemmShape is the GEMM an algorithm runs for a key, for a row count
// estimated from the key's bucket: the output is rows × cols, tiled into
// blocks (times taps for the per-tap weight gradient), each reducing over
// kIters steps of BK. For the weight gradient kLen stands for the longest
// tap segment (the engine splits by it; a submanifold map's centre tap
// has one pair per row).
type gemmShape struct {
	family     kernels.Family
	use        tileUse // what chooseTile is told
	rows, cols int64
	taps       int64   // grid multiplier (V for the per-tap weight gradient)
	kLen       int64   // reduction length per tap (or per row, gather)
	kTaps      int64   // taps the reduction runs over (gather)
	im2col     float64 // bytes of the explicit im2col matrix, 0 if none
}

func (g gemmShape) blocks(t kernels.Tile) int64 {
	return ceilDiv(g.rows, int64(t.BM)) * ceilDiv(g.cols, int64(t.BN)) * g.taps
}

func (g gemmShape) kIters(t kernels.Tile) int64 { return g.kTaps * ceilDiv(g.kLen, int64(t.BK)) }

// outElems is the number of output elements (the size of one split's
// float32 partials).
func (g gemmShape) outElems() int64 { return g.rows * g.cols * g.taps }

// splits returns the split factor the engine's heuristic gives this GEMM
// with tile t on sms multiprocessors: chooseSplits for the gather family,
// choosePairsSplits (pairsSplits) for the pairs family.
func (g gemmShape) splits(t kernels.Tile, sms int64) int {
	if g.family == kernels.Pairs {
		return pairsSplits(t, g.blocks(t), g.kIters(t), g.outElems(), sms)
	}
	return heuristicSplits(t, g.blocks(t), g.kIters(t), sms)
}

// maxSplits is the largest split factor offered for g: 16 for the gather
// family (chooseSplits' cap), pairsMaxSplits for the pairs family.
func (g gemmShape) maxSplits() int {
	if g.family == kernels.Pairs {
		return pairsMaxSplits
	}
	return 16
}

// splitUseful reports whether s splits of g with tile t are worth
// measuring: every split gets reduction steps (pairs: pairsMinIters of
// them, the engine's floor), the float32 partials stay within the
// engine's bound (pairs), and the grid does not already fill the device
// with half as many splits (gather: four waves of one block per SM;
// pairs: twice the pairsWaves blocks per SM the heuristic aims at) —
// beyond that only partial-sum traffic grows.
func (g gemmShape) splitUseful(t kernels.Tile, s int, sms int64) bool {
	blocks, kIters := g.blocks(t), g.kIters(t)
	if int64(s) > kIters {
		return false
	}
	if g.family == kernels.Pairs {
		return int64(s) <= max(kIters/pairsMinIters, 1) &&
			int64(s)*4*g.outElems() <= max(pairsPartBytes, 4*g.outElems()) &&
			blocks*int64(s/2) < 2*pairsWaves*sms
	}
	return blocks*int64(s/2) < 4*sms
}

// shapeOf mirrors the launches of conv.go (runGather, runPairs) for rows
// problem rows.
func shapeOf(k autotune.Key, alg sparse.Algorithm, rows int64, esz int) gemmShape {
	V, ci, co := int64(k.V), int64(k.Ci), int64(k.Co)
	switch k.Dir {
	case autotune.WGrad:
		if alg == sparse.Explicit {
			return gemmShape{family: kernels.Pairs, use: useIm2colWGrad, rows: co, cols: V * ci, taps: 1, kLen: rows, kTaps: 1,
				im2col: float64(rows) * float64(V*ci) * float64(esz)}
		}
		return gemmShape{family: kernels.Pairs, use: usePairs, rows: co, cols: ci, taps: V, kLen: rows, kTaps: 1}
	}
	cols, kc := co, ci
	if k.Dir == autotune.DGrad {
		cols, kc = ci, co
	}
	use := gatherUse(esz, k.Dir == autotune.DGrad, alg)
	if alg == sparse.Explicit {
		return gemmShape{family: kernels.Gather, use: use, rows: rows, cols: cols, taps: 1, kLen: V * kc, kTaps: 1,
			im2col: float64(rows) * float64(V*kc) * float64(esz)}
	}
	return gemmShape{family: kernels.Gather, use: use, rows: rows, cols: cols, taps: 1, kLen: kc, kTaps: V}
}

// rowRange returns the smallest, middle and largest row count of a key's
// bucket.
func rowRange(k autotune.Key) (lo, mid, hi int64) {
	lg := min(max(k.LogN, 0), 61)
	lo = int64(1) << lg
	return lo, lo + lo/2, 2*lo - 1
}

// preferredTiles is chooseTile's preference for Options{} on g in
// arithmetic mth on sms multiprocessors, best first: defaultTiles, the
// same function, with the use, output and reduction per tap that conv.go
// passes for g's launch (kLen: the channels reduced per tap, V·C for the
// explicit gather; unused by the weight gradient's rules; kTaps: the taps).
func preferredTiles(mth kernels.Math, g gemmShape, sms int64, hopper bool) []string {
	return defaultTiles(mth, g.use, g.rows, g.cols, g.kLen, max(g.kTaps, 1), sms, hopper)
}

// heuristicTile is the tile chooseTile picks for Options{} on g (hopper:
// the Hopper tiles of mth are offered).
func heuristicTile(mth kernels.Math, g gemmShape, sms int64, hopper bool) kernels.Tile {
	for _, name := range preferredTiles(mth, g, sms, hopper) {
		if t, err := kernels.ParseTile(name); err == nil && t.Supports(mth) {
			return t
		}
	}
	for _, t := range kernels.Tiles {
		if t.Supports(mth) {
			return t
		}
	}
	return kernels.Tiles[0]
}

// heuristicSplits is the gather family's split heuristic (chooseSplits,
// and the tuner's ranking) for blocks output tiles of tile t with kIters K
// iterations each on sms multiprocessors, at most 16 and kIters: a tile
// of several blocks per SM (mma.sync) aims at two waves of blocks; a
// Hopper tile holds one block per SM and aims at one wave at most, since
// a second wave and a deeper split cost more than the SMs it leaves idle
// (H200, session 7, BenchmarkConvTiles, m128n256k64w8x1s4h: RES 16 C
// 1024 forward 0.159 ms at the two-wave rule's 10 splits, 0.118 at 4;
// input gradient 0.169 → 0.132; RES 32 C 1024 forward 0.406 at 3 splits,
// 0.391 at 1). The weight gradient's is pairsSplits.
func heuristicSplits(t kernels.Tile, blocks, kIters, sms int64) int {
	if blocks <= 0 || kIters <= 1 {
		return 1
	}
	s := ceilDiv(2*sms, blocks)
	if t.Hopper {
		s = sms / blocks
	}
	return int(max(min(s, 16, kIters), 1))
}

// pow2Floor rounds s ≥ 1 down to a power of two, at most hi (a power of
// two).
func pow2Floor(s, hi int) int {
	if s < 1 {
		return 1
	}
	return min(1<<(bits.Len(uint(s))-1), hi)
}

// tileRank orders tiles: the heuristic's preferences first, then the
// table order.
func tileRank(pref []string, t kernels.Tile) int {
	if i := slices.Index(pref, t.Name()); i >= 0 {
		return i
	}
	return len(pref) + slices.Index(kernels.AllTiles(), t)
}

// usableTiles returns the tiles of the table that compile for mth (the
// Narrow tiles only for the 16-bit arithmetics; the Hopper tiles for the
// gather family where lim offers them) and fit the device, without those
// much wider than cols or taller than the rows can fill (BN >
// 2·max(32, cols), or BM > 64 and BM ≥ 2·rows), unless that leaves none.
func usableTiles(mth kernels.Math, g gemmShape, rowsHi int64, lim tuneLimits) []kernels.Tile {
	var valid, kept []kernels.Tile
	tiles := kernels.Tiles
	if lim.hopper[mth] {
		tiles = kernels.AllTiles()
	}
	for _, t := range tiles {
		if !t.Has(g.family, mth) || t.Validate(mth) != nil || (lim.maxSmem > 0 && kernels.SmemBytes(g.family, mth, t) > lim.maxSmem) ||
			(g.family == kernels.Gather && !t.ServesTaps(g.kTaps)) {
			continue
		}
		valid = append(valid, t)
		if int64(t.BN) > 2*max(32, g.cols) || (t.BM > 64 && int64(t.BM) >= 2*rowsHi) {
			continue
		}
		kept = append(kept, t)
	}
	if len(kept) == 0 {
		return valid
	}
	return kept
}

// convCandidates returns the candidates for k, a pure function of the key
// and the device limits (so a cached choice stays a candidate), in the
// order they are worth measuring: by the heuristic's tile preference, then
// by algorithm (split-K masked first, explicit last), then by distance of
// the split factor from the heuristic's.
func convCandidates(k autotune.Key, lim tuneLimits) []autotune.Candidate {
	mth, ok := keyMath(k)
	if !ok || k.LogN < 0 {
		return nil
	}
	esz := mth.ElemSize()
	lo, mid, hi := rowRange(k)
	sms := int64(max(k.Device.SMs, 1))
	type ranked struct {
		c                autotune.Candidate
		tile, alg, split int
	}
	var all []ranked
	for ai, alg := range algorithmsFor(k.Dir) {
		gLo, gMid := shapeOf(k, alg, lo, esz), shapeOf(k, alg, mid, esz)
		if lim.totalMem > 0 && gLo.im2col > float64(lim.totalMem)/8 {
			continue
		}
		rowsHi := hi
		if k.Dir == autotune.WGrad {
			rowsHi = gLo.rows
		}
		pref := preferredTiles(mth, gMid, sms, lim.hopper[mth])
		for _, t := range usableTiles(mth, gLo, rowsHi, lim) {
			rank := tileRank(pref, t)
			if !isSplit(alg) {
				all = append(all, ranked{autotune.Candidate{Algorithm: alg.String(), Tile: t.Name()}, rank, ai, 0})
				continue
			}
			hs := pow2Floor(gMid.splits(t, sms), gMid.maxSplits())
			for _, s := range splitsFor(k.Dir) {
				if !gLo.splitUseful(t, s, sms) {
					continue
				}
				d := bits.Len(uint(s)) - bits.Len(uint(hs))
				all = append(all, ranked{autotune.Candidate{Algorithm: alg.String(), Tile: t.Name(), SplitK: s}, rank, ai, max(d, -d)})
			}
		}
	}
	slices.SortStableFunc(all, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.tile, b.tile), cmp.Compare(a.alg, b.alg), cmp.Compare(a.split, b.split))
	})
	out := make([]autotune.Candidate, len(all))
	for i, r := range all {
		out[i] = r.c
	}
	return out
}

// convHeuristic is the tuner's heuristic: the choice of the fixed
// heuristic of conv.go (split-K masked implicit GEMM, chooseTile,
// chooseSplits or, for the weight gradient, choosePairsSplits) for the
// middle of the key's row bucket, with the split factor rounded down to a
// power of two (1: the plain algorithm). It is
// measured first. If pruning removed it, the nearest candidate of the same
// tile is used, else the first candidate.
func convHeuristic(k autotune.Key, cands []autotune.Candidate) autotune.Candidate {
	algs := algorithmsFor(k.Dir)
	splitAlg, plain := algs[0], algs[1]
	mth, _ := keyMath(k)
	_, mid, _ := rowRange(k)
	sms := int64(max(k.Device.SMs, 1))
	g := shapeOf(k, splitAlg, mid, mth.ElemSize())
	// The Hopper tiles were offered exactly when some candidate has one.
	hopper := slices.ContainsFunc(cands, func(c autotune.Candidate) bool {
		t, err := kernels.ParseTile(c.Tile)
		return err == nil && t.Hopper
	})
	t := heuristicTile(mth, g, sms, hopper)
	s := pow2Floor(g.splits(t, sms), g.maxSplits())
	want := autotune.Candidate{Algorithm: splitAlg.String(), Tile: t.Name(), SplitK: s}
	if s == 1 {
		want = autotune.Candidate{Algorithm: plain.String(), Tile: t.Name()}
	}
	if slices.Contains(cands, want) {
		return want
	}
	best, bestD := -1, 0
	for i, c := range cands {
		if c.Tile != t.Name() || (c.Algorithm != splitAlg.String() && c.Algorithm != plain.String()) {
			continue
		}
		d := bits.Len(uint(max(c.SplitK, 1))) - bits.Len(uint(s))
		d = max(d, -d)
		if best < 0 || d < bestD {
			best, bestD = i, d
		}
	}
	if best >= 0 {
		return cands[best]
	}
	return cands[0]
}

// candidateOptions turns a candidate into the options that run it.
func candidateOptions(o Options, c autotune.Candidate) (Options, error) {
	alg, err := sparse.ParseAlgorithm(c.Algorithm)
	if err != nil {
		return o, err
	}
	if alg == sparse.Auto {
		return o, fmt.Errorf("%w: candidate %v is not a concrete algorithm", sparse.ErrAlgorithm, c)
	}
	if _, err := kernels.ParseTile(c.Tile); err != nil {
		return o, fmt.Errorf("%w: candidate %v: %v", sparse.ErrShape, c, err)
	}
	o.Algorithm, o.Tile, o.SplitK = alg, c.Tile, 0
	if isSplit(alg) {
		o.SplitK = max(c.SplitK, 1)
	}
	return o, nil
}

// launchFunc runs one convolution with concrete options into a new result.
type launchFunc func(Options) (sparse.Matrix, error)

// tuned resolves sparse.Auto for one convolution call (the hook of
// Forward, InputGrad and WeightGrad, after their argument checks): it
// returns o with the algorithm, tile and split-K factor of the tuner's
// choice, or o unchanged when the fixed heuristic applies (options not
// all left to the engine, nothing to compute, mode off, a miss in mode
// cache-only). launch runs the same call with concrete options; it is used
// only to measure.
func (e *Engine) tuned(dir autotune.Direction, m *kmap.Map, mth kernels.Math, ci, co int64, o Options, launch launchFunc) (Options, error) {
	if o.Algorithm != sparse.Auto || o.Tile != "" || o.TileRows != 0 || o.SplitK != 0 {
		return o, nil
	}
	k, ok := e.convKey(dir, m, mth, ci, co)
	if !ok {
		return o, nil
	}
	st := e.autotuneState()
	r, ok := st.memoized(k)
	if ok {
		if r.Source == autotune.FromMeasurement {
			// Measured once in this process; from now on it is a cache hit.
			r.Source, r.Timings, r.Failures = autotune.FromCache, nil, nil
		}
		st.record(k, r)
	} else {
		tuner, cache, err := st.get()
		if err != nil {
			return o, err
		}
		if r, err = e.choose(st, tuner, k, launch); err != nil {
			return o, err
		}
		st.memoize(k, r, tuner, cache)
	}
	if r.Source == autotune.FromHeuristic {
		return o, nil
	}
	return candidateOptions(o, r.Choice.Candidate)
}

// choose asks tuner for k, measuring candidates through launch with CUDA
// events on a miss, and records the decision in st.
func (e *Engine) choose(st *tuneState, tuner *autotune.Tuner, k autotune.Key, launch launchFunc) (autotune.Result, error) {
	cands := convCandidates(k, e.tuneLimits())
	if len(cands) == 0 {
		// Only for an arithmetic no tile compiles for; the fixed heuristic
		// then reports the problem.
		r := autotune.Result{Source: autotune.FromHeuristic}
		st.record(k, r)
		return r, nil
	}
	var timer *Timer
	defer func() {
		if timer != nil {
			timer.Destroy()
		}
	}()
	var start time.Time
	run := func(c autotune.Candidate) (time.Duration, error) {
		if timer == nil {
			start = time.Now()
			var err error
			if timer, err = e.NewTimer(); err != nil {
				timer = nil
				return 0, err
			}
		}
		opt, err := candidateOptions(Options{}, c)
		if err != nil {
			return 0, err
		}
		st.launches.Add(1)
		if err := timer.Start(); err != nil {
			return 0, err
		}
		out, err := launch(opt)
		ms, terr := timer.Stop()
		e.Free(out)
		if err != nil {
			return 0, err
		}
		if terr != nil {
			return 0, terr
		}
		return time.Duration(float64(ms) * float64(time.Millisecond)), nil
	}
	// The trials run on the main stream, where the timer's events are
	// (Device.onSide queues nothing on the side stream meanwhile).
	e.d.pauseSide(1)
	r, err := tuner.Choose(k, cands, run)
	e.d.pauseSide(-1)
	if timer != nil {
		st.tuneNanos.Add(int64(time.Since(start)))
	}
	if err != nil {
		return r, fmt.Errorf("cudaext: autotuning %v: %w", k, err)
	}
	st.record(k, r)
	return r, nil
}

// TuneProblem is one convolution of an offline tuning grid.
type TuneProblem struct {
	// Name labels the problem in results.
	Name string
	// Map is the kernel map.
	Map *kmap.Map
	// Ci and Co are the channel counts (both at least 1).
	Ci, Co int
	// Math is the arithmetic: F32 (IEEE float32), TF32, F16 or BF16.
	Math kernels.Math
	// Dirs are the passes to tune; nil means forward, input gradient and
	// weight gradient.
	Dirs []autotune.Direction
}

// DefaultGridBudget is the per-key budget of TuneGrid: long enough that
// every candidate of a large shape is measured.
const DefaultGridBudget = 60 * time.Second

// GridOptions configures TuneGrid.
type GridOptions struct {
	// Cache receives the choices; nil means the engine's own cache (see
	// AutotuneCache), so later Auto convolutions use them at once.
	Cache *autotune.Cache
	// Retune measures every key even when Cache (or a pre-tuned table)
	// already has a choice, and stores the new one.
	Retune bool
	// Budget is the time per key (0: DefaultGridBudget); Repeats the timed
	// launches per candidate after the warm-up (0: 5).
	Budget  time.Duration
	Repeats int
	// Seed seeds the random features (uniform in [−1, 1)) and weights.
	Seed uint64
	// Progress, if set, is called after each key.
	Progress func(TuneResult)
}

// TuneResult is the outcome of one problem in one direction.
type TuneResult struct {
	// Problem is TuneProblem.Name.
	Problem string
	// Key is the tuning key (zero if Err says there was nothing to tune).
	Key autotune.Key
	// Result is the tuner's answer: the choice, its source (measured,
	// cache, pretuned) and every timing.
	Result autotune.Result
	// Wall is the time spent on the key.
	Wall time.Duration
	// Err is the key's error, if any; the grid goes on with the next key.
	Err error
}

// TuneGrid tunes every problem × direction of an offline grid on random
// inputs with the same keys, candidates and launches as Auto convolutions,
// in mode on whatever $FLEXGEMM_AUTOTUNE says, and stores the choices in
// o.Cache. It returns one result per key in order; an error of one key is
// in its result, and TuneGrid itself fails only for an invalid problem (before
// measuring anything) or a failed upload. It sets the engine's TF32 mode
// for each problem and restores it at the end, so it must not run
// concurrently with other float32 work of the engine. Device tables of each
// map are released when the next problem uses another map.
//
// A pre-tuned table for this device comes from a grid run into a fresh
// cache (or with Retune) followed by WritePretuned.
func (e *Engine) TuneGrid(problems []TuneProblem, o GridOptions) ([]TuneResult, error) {
	for i, p := range problems {
		if err := validateProblem(p); err != nil {
			return nil, fmt.Errorf("cudaext: TuneGrid: problem %d (%q): %w", i, p.Name, err)
		}
	}
	if o.Budget < 0 || o.Repeats < 0 {
		return nil, fmt.Errorf("%w: TuneGrid: budget %v and repeats %d must not be negative", sparse.ErrShape, o.Budget, o.Repeats)
	}
	st := e.autotuneState()
	target := o.Cache
	if target == nil {
		var err error
		if _, target, err = st.get(); err != nil {
			return nil, err
		}
	}
	measureIn := target
	if o.Retune {
		var err error
		if measureIn, err = autotune.Open(autotune.InMemory(), autotune.WithPretuned(nil)); err != nil {
			return nil, err
		}
	}
	budget, repeats := cmp.Or(o.Budget, DefaultGridBudget), cmp.Or(o.Repeats, 5)
	tuner, err := autotune.NewTuner(measureIn, autotune.WithMode(autotune.On), autotune.WithBudget(budget),
		autotune.WithRepeats(repeats), autotune.WithHeuristic(convHeuristic))
	if err != nil {
		return nil, err
	}
	defer e.SetTF32(e.TF32())
	rng := rand.New(rand.NewPCG(o.Seed, 0x74756e65))
	var out []TuneResult
	for i, p := range problems {
		res, err := e.tuneProblem(st, tuner, target, o.Retune, p, rng, o.Progress)
		out = append(out, res...)
		if err != nil {
			return out, fmt.Errorf("cudaext: TuneGrid: problem %d (%q): %w", i, p.Name, err)
		}
		if i+1 == len(problems) || problems[i+1].Map != p.Map {
			e.ForgetMap(p.Map)
		}
	}
	return out, nil
}

func validateProblem(p TuneProblem) error {
	switch {
	case p.Map == nil:
		return fmt.Errorf("%w: nil kernel map", sparse.ErrShape)
	case p.Map.Loaded() && len(p.Map.Nbr) != p.Map.NOut*p.Map.V(): // device-held tables are checked where loaded
		return fmt.Errorf("%w: kernel map table has %d entries, want %d·%d", sparse.ErrShape, len(p.Map.Nbr), p.Map.NOut, p.Map.V())
	case p.Ci < 1 || p.Co < 1:
		return fmt.Errorf("%w: Ci = %d and Co = %d must be at least 1", sparse.ErrShape, p.Ci, p.Co)
	case !slices.Contains(kernels.Maths, p.Math):
		return fmt.Errorf("%w: unknown arithmetic %v", sparse.ErrDType, p.Math)
	}
	for _, d := range p.Dirs {
		if d != autotune.Fwd && d != autotune.DGrad && d != autotune.WGrad {
			return fmt.Errorf("%w: direction %q (want fwd, dgrad or wgrad)", sparse.ErrShape, d)
		}
	}
	return nil
}

// tuneProblem uploads random inputs for p and tunes its directions.
func (e *Engine) tuneProblem(st *tuneState, tuner *autotune.Tuner, target *autotune.Cache, retune bool,
	p TuneProblem, rng *rand.Rand, progress func(TuneResult)) ([]TuneResult, error) {
	m := p.Map
	V := m.V()
	dt := sparse.Float32
	switch p.Math {
	case kernels.F16:
		dt = sparse.Float16
	case kernels.BF16:
		dt = sparse.BFloat16
	}
	e.SetTF32(p.Math == kernels.TF32)
	var mats []sparse.Matrix
	defer func() { e.Free(mats...) }()
	alloc := func(rows, cols int, scale float32) (sparse.Matrix, error) {
		a, err := e.Alloc(dt, rows, cols)
		if err != nil {
			return a, err
		}
		mats = append(mats, a)
		return a, e.fillRandom(a, rng, scale)
	}
	x, err := alloc(m.NIn, p.Ci, 1)
	if err != nil {
		return nil, err
	}
	w, err := alloc(p.Co, V*p.Ci, float32(1/float64(max(V*p.Ci, 1))))
	if err != nil {
		return nil, err
	}
	b, err := alloc(1, p.Co, 1)
	if err != nil {
		return nil, err
	}
	dy, err := alloc(m.NOut, p.Co, 1)
	if err != nil {
		return nil, err
	}
	dirs := p.Dirs
	if dirs == nil {
		dirs = []autotune.Direction{autotune.Fwd, autotune.DGrad, autotune.WGrad}
	}
	var out []TuneResult
	for _, dir := range dirs {
		var launch launchFunc
		switch dir {
		case autotune.Fwd:
			launch = func(c Options) (sparse.Matrix, error) { return e.Forward(m, x, w, b, c) }
		case autotune.DGrad:
			launch = func(c Options) (sparse.Matrix, error) { return e.InputGrad(m, dy, w, c) }
		default:
			launch = func(c Options) (sparse.Matrix, error) { return e.WeightGrad(m, x, dy, c) }
		}
		t0 := time.Now()
		res := TuneResult{Problem: p.Name}
		k, ok := e.convKey(dir, m, p.Math, int64(p.Ci), int64(p.Co))
		if !ok {
			res.Err = fmt.Errorf("%w: %s %v has no rows to tune (NIn %d, NOut %d)", sparse.ErrShape, p.Name, dir, m.NIn, m.NOut)
		} else {
			res.Key = k
			res.Result, res.Err = e.choose(st, tuner, k, launch)
			if res.Err == nil && retune && res.Result.Source == autotune.FromMeasurement {
				res.Err = target.Store(k, res.Result.Choice)
			}
			// Auto convolutions decide k again (from the cache).
			st.forget(k)
		}
		res.Wall = time.Since(t0)
		out = append(out, res)
		if progress != nil {
			progress(res)
		}
	}
	return out, nil
}

// fillRandom fills a device float matrix with values uniform in
// [−scale, scale), drawn in blocks of at most 1<<20 on the host (a longer
// matrix repeats its first block), converted on the device.
func (e *Engine) fillRandom(m sparse.Matrix, rng *rand.Rand, scale float32) error {
	b, err := e.buffer(m, "matrix")
	if err != nil {
		return err
	}
	n := int64(b.n)
	if n == 0 {
		return nil
	}
	blk := min(n, 1<<20)
	host := synth.Uniform[float32](rng, int(blk))
	for i := range host {
		host[i] *= scale
	}
	return e.d.do(func() error {
		d := e.d
		tmp, err := uploadFloats(d, host)
		if err != nil {
			return err
		}
		defer d.freeTemp(tmp)
		esz := int64(b.dtype.Size())
		for off := int64(0); off < n; off += blk {
			cnt := min(blk, n-off)
			if err := d.convert(tmp.ptr, sparse.Float32, b.ptr+devPtr(off*esz), b.dtype, cnt); err != nil {
				return err
			}
		}
		return nil
	})
}

// uploadFloats copies float32 host data to a new block. Worker only.
func uploadFloats(d *Device, s []float32) (rawBuf, error) {
	raw := make([]int32, len(s))
	for i, v := range s {
		raw[i] = int32(math.Float32bits(v))
	}
	return uploadSlice(d, raw)
}

// WritePretuned writes the measured choices of cache for this engine's
// device as a pre-tuned table to path (for example
// autotune/pretuned/h200.json, which is embedded into the next build),
// replacing the file atomically. note says where the entries come from.
func (e *Engine) WritePretuned(cache *autotune.Cache, path, note string) error {
	if cache == nil {
		return errors.New("cudaext: WritePretuned: nil cache")
	}
	var sb strings.Builder
	if err := cache.WriteTable(&sb, e.AutotuneDevice(), note); err != nil {
		return fmt.Errorf("cudaext: WritePretuned: %w", err)
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("cudaext: WritePretuned: %w", err)
	}
	tmp := f.Name()
	_, err = f.WriteString(sb.String())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cudaext: WritePretuned %s: %w", path, err)
	}
	return nil
}

// Default resolutions and channel counts of ShellGrid for a pre-tuned
// table: FlexGEMM's sphere-shell benchmark scenes (N from 15,192 at
// resolution 64 to 1,026,536 at 256) and the channel widths of its charts.
var (
	DefaultTuneResolutions = []int{64, 128, 256}
	DefaultTuneChannels    = []int{16, 32, 64, 128, 256}
)

// ShellGrid returns an offline tuning grid on FlexGEMM's sphere-shell
// scenes (synth.SphereShell, batch 1): for each resolution, a submanifold
// 3×3×3 map and a strided 2×2×2 stride-2 map (the down-sampling of a
// UNet), each with Ci = Co = c for every channel count and every
// arithmetic in maths, all three directions.
func ShellGrid(resolutions, channels []int, maths []kernels.Math) ([]TuneProblem, error) {
	var out []TuneProblem
	for _, res := range resolutions {
		if res < 2 {
			return nil, fmt.Errorf("%w: ShellGrid: resolution %d (want at least 2)", sparse.ErrShape, res)
		}
		coords, ext := synth.SphereShell(res, 1)
		subm, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
		if err != nil {
			return nil, fmt.Errorf("ShellGrid: resolution %d: %w", res, err)
		}
		down, err := kmap.NewStrided(coords, ext, grid.Cube(2, 2, 0, 1), nil)
		if err != nil {
			return nil, fmt.Errorf("ShellGrid: resolution %d: %w", res, err)
		}
		for _, mk := range []struct {
			name string
			m    *kmap.Map
		}{{"subm3", subm}, {"down2", down}} {
			for _, c := range channels {
				for _, mth := range maths {
					out = append(out, TuneProblem{Name: fmt.Sprintf("shell%d-%s-c%d-%v", res, mk.name, c, mth), Map: mk.m, Ci: c, Co: c, Math: mth})
				}
			}
		}
	}
	return out, nil
}
