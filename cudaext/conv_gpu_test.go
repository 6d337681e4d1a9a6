//go:build cudaext

package cudaext

// GPU tests of the convolution engine. They need a GPU: build the binary
// here and run it on the GPU machine. cudaext/gpu_run.sh does both:
//
//	bash cudaext/gpu_run.sh build   # here: go test -c -tags cudaext -o .gpu/cudaext.test ./cudaext
//	bash .gpu/run.sh                # there: sanitizers, full test, table, benchmarks
//
// Without a GPU every test is skipped (TestMain), unless
// FLEXGEMM_REQUIRE_GPU=1 makes that a failure, or FLEXGEMM_HOST_TESTS=1
// runs the tests that need no device (hosttests_test.go).

import (
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

var gpu *Engine

func TestMain(m *testing.M) {
	e, err := Open(0)
	if err != nil && os.Getenv(EnvHostTests) == "1" {
		// No usable device: the tests that need none, against a host-only
		// engine.
		fmt.Printf("cudaext: Open(0): %v; running the host tests\n", err)
		if gpu, err = hostEngine(); err == nil {
			err = runHostTests()
		}
		if err != nil {
			fmt.Println("cudaext:", err)
			os.Exit(1)
		}
		os.Exit(m.Run())
	}
	if err != nil {
		if errors.Is(err, ErrNoDevice) && os.Getenv("FLEXGEMM_REQUIRE_GPU") != "1" {
			fmt.Println("cudaext: GPU tests skipped:", err)
			os.Exit(0)
		}
		fmt.Println("cudaext: Open(0):", err)
		os.Exit(1)
	}
	gpu = e
	e.SetPoisonOutputs(true)
	info := e.Info()
	fmt.Printf("cudaext: %s (sm_%d%d, %d SMs, %.1f GiB), driver %d\n", info.Name, info.Major, info.Minor, info.SMs,
		float64(info.TotalMem)/(1<<30), info.DriverVersion)
	code := m.Run()
	results.print(os.Stdout)
	if dir := os.Getenv("FLEXGEMM_TEST_OUT"); dir != "" && len(results.rows) > 0 {
		if f, err := os.Create(filepath.Join(dir, "variants.txt")); err == nil {
			results.printAll(f)
			f.Close()
		}
	}
	st := e.MemStats()
	fmt.Printf("cudaext: memory peak in use %s, peak reserved %s, %d cuMemAlloc calls, %d cache hits\n",
		human(st.PeakInUse), human(st.PeakReserved), st.DriverAllocs, st.CacheHits)
	_ = e.Close()
	os.Exit(code)
}

// ---- result table ---------------------------------------------------------

type variantKey struct {
	alg  sparse.Algorithm
	dir  string
	math kernels.Math
	tile string
}

type variantStat struct {
	maxErr float64
	runs   int
	fails  []string
}

type resultTable struct {
	mu   sync.Mutex
	rows map[variantKey]*variantStat
}

var results = resultTable{rows: map[variantKey]*variantStat{}}

func bound(m kernels.Math) float64 {
	switch m {
	case kernels.F32:
		return 1e-5
	case kernels.TF32:
		return 2e-3
	}
	return 1e-2
}

// accBound is the bound of the float32 weight and bias gradients of
// float16/bfloat16 inputs (directions wgrad32 and bias32), measured against
// the float64 reference of the rounded inputs: only float32 accumulation
// separates them (products of narrow values are exact in float32). Rounding
// the result to float16 alone would cost about 2e-4, to bfloat16 about
// 1.5e-3.
const accBound = 1e-4

// boundOf returns the error bound of variant k.
func boundOf(k variantKey) float64 {
	if k.dir == "wgrad32" || k.dir == "bias32" {
		return accBound
	}
	return bound(k.math)
}

func (r *resultTable) add(k variantKey, scene string, err float64) bool {
	ok := err <= boundOf(k) // NaN fails
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.rows[k]
	if s == nil {
		s = &variantStat{}
		r.rows[k] = s
	}
	s.runs++
	switch {
	case math.IsNaN(s.maxErr):
	case math.IsNaN(err) || err > s.maxErr:
		s.maxErr = err
	}
	if !ok {
		s.fails = append(s.fails, fmt.Sprintf("%s: %.3g", scene, err))
	}
	return ok
}

func (r *resultTable) sorted() []variantKey {
	keys := make([]variantKey, 0, len(r.rows))
	for k := range r.rows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if a.dir != b.dir {
			return a.dir < b.dir
		}
		if a.alg != b.alg {
			return a.alg < b.alg
		}
		if a.math != b.math {
			return a.math < b.math
		}
		return a.tile < b.tile
	})
	return keys
}

// printAll writes one line per variant (algorithm × direction × math ×
// tile).
func (r *resultTable) printAll(w *os.File) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(w, "%-28s %-6s %-5s %-18s %5s %10s %s\n", "algorithm", "dir", "math", "tile", "runs", "max err", "pass")
	for _, k := range r.sorted() {
		s := r.rows[k]
		pass := "PASS"
		if len(s.fails) > 0 {
			pass = "FAIL " + strings.Join(s.fails, "; ")
		}
		fmt.Fprintf(w, "%-28v %-6s %-5v %-18s %5d %10.3g %s\n", k.alg, k.dir, k.math, k.tile, s.runs, s.maxErr, pass)
	}
}

// print writes the summary: one line per algorithm × direction × math
// (max over tiles and scenes), then every failing variant.
func (r *resultTable) print(w *os.File) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rows) == 0 {
		return
	}
	type sk struct {
		alg  sparse.Algorithm
		dir  string
		math kernels.Math
	}
	sum := map[sk]*variantStat{}
	var order []sk
	var failures []string
	for _, k := range r.sorted() {
		s := r.rows[k]
		key := sk{k.alg, k.dir, k.math}
		t := sum[key]
		if t == nil {
			t = &variantStat{}
			sum[key] = t
			order = append(order, key)
		}
		t.runs += s.runs
		switch {
		case math.IsNaN(t.maxErr):
		case math.IsNaN(s.maxErr) || s.maxErr > t.maxErr:
			t.maxErr = s.maxErr
		}
		t.fails = append(t.fails, s.fails...)
		if len(s.fails) > 0 {
			failures = append(failures, fmt.Sprintf("  %v %s %v %s: %s", k.alg, k.dir, k.math, k.tile, strings.Join(s.fails, "; ")))
		}
	}
	fmt.Fprintf(w, "\n== cudaext convolution variants vs CPU float64 (relative L2; bounds f32 1e-5, tf32 2e-3, f16/bf16 1e-2;\n"+
		"   wgrad32/bias32 = float32 gradients of f16/bf16 inputs vs the float64 reference of the rounded inputs, bound %.0e)\n", accBound)
	fmt.Fprintf(w, "%-28s %-6s %-5s %5s %10s %s\n", "algorithm", "dir", "math", "runs", "max err", "result")
	npass, nfail := 0, 0
	for _, k := range order {
		t := sum[k]
		res := "PASS"
		if len(t.fails) > 0 {
			res = fmt.Sprintf("FAIL (%d)", len(t.fails))
			nfail++
		} else {
			npass++
		}
		fmt.Fprintf(w, "%-28v %-6s %-5v %5d %10.3g %s\n", k.alg, k.dir, k.math, t.runs, t.maxErr, res)
	}
	if len(failures) > 0 {
		fmt.Fprintf(w, "failing variants (tile: scene: error):\n%s\n", strings.Join(failures[:min(len(failures), 40)], "\n"))
	}
	fmt.Fprintf(w, "== %d variant groups pass, %d fail (%d tile-level variants)\n", npass, nfail, len(r.rows))
}

// ---- helpers ------------------------------------------------------------

// relL2 returns ‖got − ref‖ / ‖ref‖ (‖got‖ when ref is zero; NaN when got
// holds NaN or the lengths differ).
func relL2(got []float32, ref []float64) float64 {
	if len(got) != len(ref) {
		return math.NaN()
	}
	var num, den float64
	for i, g := range got {
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			return math.NaN()
		}
		d := float64(g) - ref[i]
		num += d * d
		den += ref[i] * ref[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

func f64(a []float32) []float64 {
	out := make([]float64, len(a))
	for i, v := range a {
		out[i] = float64(v)
	}
	return out
}

func dtypeOf(m kernels.Math) sparse.DType {
	switch m {
	case kernels.F16:
		return sparse.Float16
	case kernels.BF16:
		return sparse.BFloat16
	}
	return sparse.Float32
}

func host(t testing.TB, m sparse.Matrix) []float32 {
	t.Helper()
	h, err := gpu.ToHost(m)
	require.NoError(t, err)
	return h.F32()
}

func dev(t testing.TB, rows, cols int, data []float32, dt sparse.DType) sparse.Matrix {
	t.Helper()
	m, err := gpu.ToDeviceAs(sparse.Matrix{Rows: rows, Cols: cols, Data: data}, dt)
	require.NoError(t, err)
	return m
}

// ---- scenes ------------------------------------------------------------------

type scene struct {
	name string
	m    *kmap.Map
}

// mapOK returns a function that unwraps a map builder's result, failing
// t on error.
func mapOK(t testing.TB) func(*kmap.Map, error) *kmap.Map {
	return func(m *kmap.Map, err error) *kmap.Map {
		t.Helper()
		require.NoError(t, err)
		return m
	}
}

// shell8Map returns the submanifold 3×3×3 map of the RES 8 sphere shell,
// released when the test ends.
func shell8Map(t *testing.T) *kmap.Map {
	coords, ext := synth.SphereShell(8, 1)
	m := mapOK(t)(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	t.Cleanup(func() { gpu.ReleaseMap(m) })
	return m
}

// testScenes returns the kernel maps of the sweep: a sphere shell
// (submanifold, batch 2), a random scene with strided, inverse and
// transposed maps, a 5×5×5 submanifold map (V = 125 > 64), a dilated map
// and an empty scene (N = 0).
func testScenes(t testing.TB, rng *rand.Rand, short bool) []scene {
	t.Helper()
	ok := mapOK(t)
	var out []scene
	if short {
		coords, ext := synth.SphereShell(8, 2)
		out = append(out, scene{"shell8b2-subm3", ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))})
		rext := grid.Extent{Batch: 1, X: 10, Y: 9, Z: 8}
		rc := synth.RandomScene(rng, rext, 0.15)
		s := ok(kmap.NewStrided(rc, rext, grid.Cube(3, 2, 1, 1), nil))
		out = append(out, scene{"random-strided", s})
		out = append(out, scene{"random-transposed", ok(kmap.NewTransposed(rc, rext, grid.Cube(2, 2, 0, 1)))})
		out = append(out, scene{"empty", ok(kmap.NewSubmanifold(nil, grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}, [3]int{3, 3, 3}, [3]int{1, 1, 1}))})
		return out
	}
	coords, ext := synth.SphereShell(16, 2)
	out = append(out, scene{"shell16b2-subm3", ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))})
	rext := grid.Extent{Batch: 2, X: 20, Y: 18, Z: 22}
	rc := synth.RandomScene(rng, rext, 0.08)
	s := ok(kmap.NewStrided(rc, rext, grid.Cube(3, 2, 1, 1), nil))
	out = append(out, scene{"random-strided-k3s2", s})
	out = append(out, scene{"random-inverse", ok(kmap.NewInverse(s))})
	out = append(out, scene{"random-transposed-k2s2", ok(kmap.NewTransposed(rc, rext, grid.Cube(2, 2, 0, 1)))})
	kext := grid.Extent{Batch: 1, X: 12, Y: 12, Z: 12}
	kc := synth.RandomScene(rng, kext, 0.2)
	out = append(out, scene{"random-subm5", ok(kmap.NewSubmanifold(kc, kext, [3]int{5, 5, 5}, [3]int{1, 1, 1}))})
	out = append(out, scene{"random-subm3-dil2", ok(kmap.NewSubmanifold(kc, kext, [3]int{3, 3, 3}, [3]int{2, 2, 2}))})
	out = append(out, scene{"empty", ok(kmap.NewSubmanifold(nil, grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}, [3]int{3, 3, 3}, [3]int{1, 1, 1}))})
	return out
}

// TestWholeTiles runs the sweep with 256 input and output channels, a
// multiple of every tile's width and height, so that each kernel's
// whole-tile stores (pairs_store and gather_store without bounds tests)
// run: the sweep's channel configs leave most Hopper tiles partial.
func TestWholeTiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, uint64(os.Getpid())))
	coords, ext := synth.SphereShell(12, 1)
	m := mapOK(t)(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	const c = 256
	for _, tile := range kernels.AllTiles() {
		// The pairs kernels' tiles span Co × Ci; a gather tile's rows are
		// the scene's, its columns the channels.
		if tile.Has(kernels.Pairs, kernels.F16) {
			require.Zero(t, c%tile.BM, "tile %s", tile.Name())
		}
		require.Zero(t, c%tile.BN, "tile %s", tile.Name())
	}
	sweepOne(t, m, cpuReference(t, rng, m, c, c), fmt.Sprintf("shell12-subm3/ci%d-co%d", c, c))
}

// TestNarrowWholeTiles checks the whole-tile epilogue where its 16-byte
// stores do not apply: 66 output channels (even, so whole tiles of 64 or
// fewer columns still take the pair stores, but rows of 132 bytes, so no
// 16-byte alignment at every 8-column fragment) against 256 in
// TestWholeTiles, which every tile stores 16 bytes a lane.
func TestNarrowWholeTiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, uint64(os.Getpid())))
	coords, ext := synth.SphereShell(12, 1)
	m := mapOK(t)(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	const ci, co = 64, 66
	sweepOne(t, m, cpuReference(t, rng, m, ci, co), fmt.Sprintf("shell12-subm3/ci%d-co%d", ci, co))
}

// reference holds float64 results of the CPU engine for one scene and one
// channel configuration.
type reference struct {
	ci, co        int
	x, w, b, dy   []float32
	y, dx, dw, db []float64
	// dwR and dbR are the float64 weight and bias gradients of x and dy
	// rounded to float16 (index 0) and bfloat16 (index 1).
	dwR, dbR [2][]float64
}

// operands uploads the reference's x, w, b and dy for map m in dtype dt:
// [NIn, ci], [co, V·ci], [1, co] and [NOut, co].
func (r *reference) operands(t testing.TB, m *kmap.Map, dt sparse.DType) (x, w, b, dy sparse.Matrix) {
	t.Helper()
	return dev(t, m.NIn, r.ci, r.x, dt), dev(t, r.co, m.V()*r.ci, r.w, dt), dev(t, 1, r.co, r.b, dt), dev(t, m.NOut, r.co, r.dy, dt)
}

// narrowIndex returns the index of a narrow arithmetic in reference.dwR.
func narrowIndex(m kernels.Math) int {
	if m == kernels.BF16 {
		return 1
	}
	return 0
}

// roundTo rounds v to the storage dtype of m (float32 for F32 and TF32).
func roundTo(m kernels.Math, v float32) float32 {
	switch m {
	case kernels.F16:
		return HalfBitsToFloat32(Float32ToHalfBits(v))
	case kernels.BF16:
		return BFloat16BitsToFloat32(Float32ToBFloat16Bits(v))
	}
	return v
}

// roundedF64 returns the values of a rounded to the storage dtype of m, in
// float64.
func roundedF64(m kernels.Math, a []float32) []float64 {
	out := make([]float64, len(a))
	for i, v := range a {
		out[i] = float64(roundTo(m, v))
	}
	return out
}

// refWeightGrad returns the float64 CPU weight and bias gradients of x
// [m.NIn, ci] and dy [m.NOut, co].
func refWeightGrad(t testing.TB, m *kmap.Map, x, dy []float64, ci, co int) (dw, db []float64) {
	t.Helper()
	xm := sparse.Matrix{Rows: m.NIn, Cols: ci, Data: x}
	dym := sparse.Matrix{Rows: m.NOut, Cols: co, Data: dy}
	g, err := sparse.ConvWeightGrad(m, xm, dym, sparse.ConvOptions{Algorithm: sparse.Implicit})
	require.NoError(t, err)
	b, err := sparse.BiasGrad(dym)
	require.NoError(t, err)
	require.Len(t, g.F64(), co*m.V()*ci)
	return g.F64(), b.F64()
}

// storageDType returns the dtype of a device matrix.
func storageDType(t testing.TB, m sparse.Matrix) sparse.DType {
	t.Helper()
	st, ok := m.Data.(sparse.Storage)
	require.True(t, ok, "%T is not device storage", m.Data)
	return st.DType()
}

// testTiles returns the tiles a GPU test runs for arithmetic mth: the
// plain tiles, and the Hopper tiles too where the device loaded them
// (sm_90).
func testTiles(mth kernels.Math) []kernels.Tile {
	if gpu.d.hopperTiles(mth) {
		return kernels.AllTiles()
	}
	return kernels.Tiles
}

// sampledTile reports whether the shorter sweeps run tile: every Hopper
// tile and the first of tiles (a plain one).
func sampledTile(tiles []kernels.Tile, tile kernels.Tile) bool {
	return tile.Hopper || tile.Name() == tiles[0].Name()
}

// shellAndRandomScenes returns the scenes of the per-tap and hybrid tests:
// the RES 8 shell and a random scene of extent rext (density 0.3), both
// submanifold 3×3×3 maps.
func shellAndRandomScenes(t *testing.T, rng *rand.Rand, rext grid.Extent) []scene {
	return []scene{
		{"shell8-subm3", shell8Map(t)},
		{"random-subm3", mapOK(t)(kmap.NewSubmanifold(synth.RandomScene(rng, rext, 0.3), rext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))},
	}
}

func cpuReference(t testing.TB, rng *rand.Rand, m *kmap.Map, ci, co int) *reference {
	t.Helper()
	V := m.V()
	r := &reference{ci: ci, co: co}
	r.x = synth.Uniform[float32](rng, m.NIn*ci)
	r.w = synth.Uniform[float32](rng, co*V*ci)
	r.b = synth.Uniform[float32](rng, co)
	r.dy = synth.Uniform[float32](rng, m.NOut*co)
	x := sparse.Matrix{Rows: m.NIn, Cols: ci, Data: f64(r.x)}
	w := sparse.Matrix{Rows: co, Cols: V * ci, Data: f64(r.w)}
	b := sparse.Matrix{Rows: 1, Cols: co, Data: f64(r.b)}
	dy := sparse.Matrix{Rows: m.NOut, Cols: co, Data: f64(r.dy)}
	opt := sparse.ConvOptions{Algorithm: sparse.Implicit}
	y, err := sparse.Conv(m, x, w, b, opt)
	require.NoError(t, err)
	dx, err := sparse.ConvInputGrad(m, dy, w, opt)
	require.NoError(t, err)
	dw, err := sparse.ConvWeightGrad(m, x, dy, opt)
	require.NoError(t, err)
	db, err := sparse.BiasGrad(dy)
	require.NoError(t, err)
	r.y, r.dx, r.dw, r.db = y.F64(), dx.F64(), dw.F64(), db.F64()
	for i, mth := range []kernels.Math{kernels.F16, kernels.BF16} {
		r.dwR[i], r.dbR[i] = refWeightGrad(t, m, roundedF64(mth, r.x), roundedF64(mth, r.dy), ci, co)
	}
	require.Len(t, r.y, m.NOut*co)
	require.Len(t, r.dx, m.NIn*ci)
	require.Len(t, r.dw, co*V*ci)
	return r
}

// channelConfigs are the (ci, co) pairs of TestConvSweep: channel counts
// whose rows are not 16-byte multiples (the copy paths by element), and
// 16-byte rows whose reduction takes several 64-element K stages per tap
// with a partial last one and a partial output tile (136, 72: the Hopper
// tiles' cp.async paths past one stage).
var channelConfigs = [][2]int{{3, 13}, {13, 96}, {64, 32}, {136, 72}}

// TestConvSweep checks every algorithm × direction × arithmetic × tile
// against the CPU engine in float64 on every scene and channel config.
func TestConvSweep(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, uint64(os.Getpid())))
	short := testing.Short()
	chans := channelConfigs
	if short {
		chans = [][2]int{{13, 96}, {64, 32}}
	}
	for _, sc := range testScenes(t, rng, short) {
		for _, ch := range chans {
			ref := cpuReference(t, rng, sc.m, ch[0], ch[1])
			name := fmt.Sprintf("%s/ci%d-co%d", sc.name, ch[0], ch[1])
			t.Run(name, func(t *testing.T) { sweepOne(t, sc.m, ref, name) })
		}
	}
}

// envSelected reports whether name passes the comma-separated filter in
// environment variable key (unset = everything), used to narrow sanitizer
// runs: FLEXGEMM_TEST_MATHS=f16 FLEXGEMM_TEST_TILES=m64n32k32w2x1s4.
func envSelected(key, name string) bool {
	v := os.Getenv(key)
	if v == "" {
		return true
	}
	for _, f := range strings.Split(v, ",") {
		if f == name {
			return true
		}
	}
	return false
}

func sweepOne(t *testing.T, m *kmap.Map, ref *reference, scene string) {
	for _, mth := range kernels.Maths {
		if !envSelected("FLEXGEMM_TEST_MATHS", mth.String()) {
			continue
		}
		gpu.SetTF32(mth == kernels.TF32)
		dt := dtypeOf(mth)
		x, w, b, dy := ref.operands(t, m, dt)
		tiles := testTiles(kernels.F16)
		for ti, tile := range tiles {
			if !envSelected("FLEXGEMM_TEST_TILES", tile.Name()) {
				continue
			}
			if !tile.Supports(mth) {
				// 16-bit-only tile: a clear error naming the tile, not a
				// launch of a kernel that does not exist, in every
				// direction and algorithm, also when there is nothing to
				// compute (N = 0).
				for _, alg := range sparse.Algorithms {
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}, Tile: tile.Name()}
					_, errF := gpu.Forward(m, x, w, b, o)
					_, errD := gpu.InputGrad(m, dy, w, o)
					_, errW := gpu.WeightGrad(m, x, dy, o)
					for i, err := range []error{errF, errD, errW} {
						require.ErrorIs(t, err, sparse.ErrShape, "%v %v direction %d", alg, mth, i)
						require.ErrorContains(t, err, tile.Name())
						if tile.Hopper {
							require.ErrorContains(t, err, "128 bytes")
						} else {
							require.ErrorContains(t, err, "16-bit arithmetics only")
						}
					}
				}
				continue
			}
			for _, alg := range sparse.Algorithms {
				o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}, Tile: tile.Name()}
				if isSplit(alg) && ti%2 == 1 {
					o.SplitK = 3 // explicit split count; even tiles use the heuristic
				}
				if taps := gatherTaps(alg, int64(m.V())); !tile.ServesTaps(taps) {
					// A specialised tile without a plain twin (the
					// 192-row one) on a kernel of more than 27 taps: a
					// clear error naming it, not a launch.
					_, errF := gpu.Forward(m, x, w, b, o)
					_, errD := gpu.InputGrad(m, dy, w, o)
					for i, err := range []error{errF, errD} {
						require.ErrorIs(t, err, sparse.ErrShape, "%v %v direction %d", alg, mth, i)
						require.ErrorContains(t, err, tile.Name()+" is warp-specialised without a plain twin")
					}
					continue
				}
				check := func(dir string, got sparse.Matrix, err error, want []float64) {
					k := variantKey{alg, dir, mth, tile.Name()}
					if err != nil {
						results.add(k, scene, math.NaN())
						t.Errorf("%v %s %v %s: %v", alg, dir, mth, tile.Name(), err)
						return
					}
					e := relL2(host(t, got), want)
					gpu.Free(got)
					if !results.add(k, scene, e) {
						t.Errorf("%v %s %v %s: relative error %.3g > %.0e", alg, dir, mth, tile.Name(), e, bound(mth))
					}
				}
				y, err := gpu.Forward(m, x, w, b, o)
				check("fwd", y, err, ref.y)
				dx, err := gpu.InputGrad(m, dy, w, o)
				check("dgrad", dx, err, ref.dx)
				if dt == sparse.Float32 {
					dw, err := gpu.WeightGrad(m, x, dy, o)
					check("wgrad", dw, err, ref.dw)
					continue
				}
				// Narrow inputs: the narrow result on request (the wgrad
				// bound), the float32 one by default (vs the rounded
				// inputs' reference), and the narrow one must be the
				// float32 one rounded, bit for bit (same partials, same
				// reduction order).
				on := o
				on.NarrowWeightGrad = true
				dwN, err := gpu.WeightGrad(m, x, dy, on)
				if err == nil {
					require.Equal(t, dt, storageDType(t, dwN))
				}
				var hN []float32
				if err == nil {
					hN = host(t, dwN)
				}
				check("wgrad", dwN, err, ref.dw)
				dw32, err := gpu.WeightGrad(m, x, dy, o)
				if err == nil {
					require.Equal(t, sparse.Float32, storageDType(t, dw32))
					if h32 := host(t, dw32); hN != nil {
						for i, v := range h32 {
							if r := roundTo(mth, v); math.Float32bits(r) != math.Float32bits(hN[i]) {
								t.Errorf("%v wgrad %v %s: element %d: narrow %g is not the float32 %g rounded (%g)", alg, mth, tile.Name(), i, hN[i], v, r)
								break
							}
						}
					}
				}
				check("wgrad32", dw32, err, ref.dwR[narrowIndex(mth)])
			}
		}
		db, err := gpu.BiasGrad(dy)
		require.NoError(t, err)
		require.Equal(t, sparse.Float32, storageDType(t, db), "BiasGrad returns float32")
		h32 := host(t, db)
		gpu.Free(db)
		if dt != sparse.Float32 {
			if e := relL2(h32, ref.dbR[narrowIndex(mth)]); !results.add(variantKey{sparse.Auto, "bias32", mth, "-"}, scene, e) {
				t.Errorf("BiasGrad %v (float32): relative error %.3g vs the rounded inputs", mth, e)
			}
			// The narrow result on request: the float32 one rounded.
			if db, err = gpu.BiasGradAs(dy, dt); err == nil {
				require.Equal(t, dt, storageDType(t, db))
				hN := host(t, db)
				for i, v := range h32 {
					require.Equalf(t, math.Float32bits(roundTo(mth, v)), math.Float32bits(hN[i]), "BiasGradAs %v element %d", mth, i)
				}
				h32 = hN
				gpu.Free(db)
			}
			require.NoError(t, err)
		}
		if e := relL2(h32, ref.db); !results.add(variantKey{sparse.Auto, "bias", mth, "-"}, scene, e) {
			t.Errorf("BiasGrad %v: relative error %.3g", mth, e)
		}
		gpu.Free(x, w, b, dy)
	}
	gpu.SetTF32(false)
}

// rel64 returns ‖a − b‖ / ‖b‖ for float64 slices of one length.
func rel64(a, b []float64) float64 {
	var num, den float64
	for i := range a {
		d := a[i] - b[i]
		num += d * d
		den += b[i] * b[i]
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// wgrad32Cases are the weight-gradient launches of TestWeightGradFloat32:
// one split without and with the split-K algorithm (the kernel writes its
// float32 accumulators straight into the result), several splits (float32
// partials, float32 reduction), the heuristic's split count, the explicit
// algorithm (im2col + one pairs GEMM with V = 1) and Auto.
var wgrad32Cases = []struct {
	name string
	opt  sparse.ConvOptions
}{
	{"implicit", sparse.ConvOptions{Algorithm: sparse.Implicit}},
	{"splitk1", sparse.ConvOptions{Algorithm: sparse.ImplicitSplitK, SplitK: 1}},
	{"splitk3", sparse.ConvOptions{Algorithm: sparse.ImplicitSplitK, SplitK: 3}},
	{"masked-splitk-heuristic", sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}},
	{"explicit", sparse.ConvOptions{Algorithm: sparse.Explicit}},
	{"auto", sparse.ConvOptions{}},
}

// TestWeightGradFloat32 checks the mixed-precision contract of the weight
// and bias gradients: for float16/bfloat16 inputs they come back in
// float32, straight from the float32 accumulators. Against the float64
// reference of the rounded inputs only float32 accumulation remains
// (accBound); against the reference of the unrounded inputs the error is
// that of the input rounding alone (plus accBound), and it is smaller than
// that of the narrow result asked for with NarrowWeightGrad.
func TestWeightGradFloat32(t *testing.T) {
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(21, 22))
	coords, ext := synth.SphereShell(16, 1)
	rext := grid.Extent{Batch: 1, X: 20, Y: 18, Z: 22}
	maps := []scene{
		{"shell16-subm3", ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))},
		{"random-strided-k3s2", ok(kmap.NewStrided(synth.RandomScene(rng, rext, 0.08), rext, grid.Cube(3, 2, 1, 1), nil))},
	}
	for _, sc := range maps {
		m := sc.m
		// 13 channels: unaligned rows (plain loads) and odd column counts
		// (scalar stores); 32/64: the cp.async path and paired stores.
		for _, ch := range [][2]int{{13, 40}, {32, 64}} {
			ci, co := ch[0], ch[1]
			xs := synth.Uniform[float32](rng, m.NIn*ci)
			dys := synth.Uniform[float32](rng, m.NOut*co)
			dwRef, dbRef := refWeightGrad(t, m, f64(xs), f64(dys), ci, co)
			for _, mth := range []kernels.Math{kernels.F16, kernels.BF16} {
				dt := dtypeOf(mth)
				dwR, dbR := refWeightGrad(t, m, roundedF64(mth, xs), roundedF64(mth, dys), ci, co)
				eIn := rel64(dwR, dwRef) // what input rounding alone costs
				x := dev(t, m.NIn, ci, xs, dt)
				dy := dev(t, m.NOut, co, dys, dt)
				for _, c := range wgrad32Cases {
					name := fmt.Sprintf("%s/ci%d-co%d/%v/%s", sc.name, ci, co, mth, c.name)
					o := Options{ConvOptions: c.opt}
					dw, err := gpu.WeightGrad(m, x, dy, o)
					require.NoError(t, err, name)
					require.Equal(t, sparse.Float32, storageDType(t, dw), name)
					h32 := host(t, dw)
					gpu.Free(dw)
					e32 := relL2(h32, dwR)
					results.add(variantKey{c.opt.Algorithm, "wgrad32", mth, c.name}, sc.name, e32)
					require.LessOrEqual(t, e32, accBound, "%s: float32 result vs the rounded inputs", name)
					require.LessOrEqual(t, relL2(h32, dwRef), eIn+accBound, "%s: error beyond input rounding (%.3g)", name, eIn)

					o.NarrowWeightGrad = true
					dwN, err := gpu.WeightGrad(m, x, dy, o)
					require.NoError(t, err, name)
					require.Equal(t, dt, storageDType(t, dwN), name)
					eN := relL2(host(t, dwN), dwR)
					gpu.Free(dwN)
					require.Less(t, e32, eN/2, "%s: the float32 result (%.3g) must not carry the narrow rounding (%.3g)", name, e32, eN)
					t.Logf("%s: vs rounded inputs: float32 %.2e, narrow %.2e; input rounding %.2e", name, e32, eN, eIn)
				}
				db, err := gpu.BiasGrad(dy)
				require.NoError(t, err)
				require.Equal(t, sparse.Float32, storageDType(t, db))
				hb := host(t, db)
				gpu.Free(db, x, dy)
				require.LessOrEqual(t, relL2(hb, dbR), accBound, "bias %v", mth)
				require.LessOrEqual(t, relL2(hb, dbRef), rel64(dbR, dbRef)+accBound, "bias %v", mth)
			}
		}
	}
}

// splitTestMaps returns the maps of the weight-gradient split tests: a
// submanifold 3×3×3 map of the sphere shell of resolution res (mirrored
// pair lists, identity centre), and a strided k3s2 and a transposed k2s2
// map of a random scene of density in rext.
func splitTestMaps(t *testing.T, rng *rand.Rand, res int, rext grid.Extent, density float64) []scene {
	t.Helper()
	ok := mapOK(t)
	coords, ext := synth.SphereShell(res, 1)
	rc := synth.RandomScene(rng, rext, density)
	return []scene{
		{fmt.Sprintf("shell%d-subm3", res), ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))},
		{"random-strided-k3s2", ok(kmap.NewStrided(rc, rext, grid.Cube(3, 2, 1, 1), nil))},
		{"random-transposed-k2s2", ok(kmap.NewTransposed(rc, rext, grid.Cube(2, 2, 0, 1)))},
	}
}

// wgradCase is one weight-gradient case of the split tests: x [m.NIn, ci]
// and dy [m.NOut, co] on the device in mth's storage dtype (the caller
// frees them), the float64 result to compare with (of the rounded inputs
// for 16-bit storage) and the relative-L2 bound of the comparison.
type wgradCase struct {
	ci, co int
	mth    kernels.Math
	x, dy  sparse.Matrix
	want   []float64
	lim    float64
}

// wgradCases yields the cases of the split tests on m: 8 channels (small
// outputs, so the partials' cap leaves many slices), 13 → 40 (unaligned
// rows: plain loads) and 32 → 64 (cp.async), random inputs drawn from rng
// once per channel pair, each in every arithmetic with the engine's tf32
// mode set to match (the caller resets it).
func wgradCases(t *testing.T, rng *rand.Rand, m *kmap.Map) iter.Seq[wgradCase] {
	return func(yield func(wgradCase) bool) {
		for _, ch := range [][2]int{{8, 8}, {13, 40}, {32, 64}} {
			ci, co := ch[0], ch[1]
			xs := synth.Uniform[float32](rng, m.NIn*ci)
			dys := synth.Uniform[float32](rng, m.NOut*co)
			for _, mth := range kernels.Maths {
				gpu.SetTF32(mth == kernels.TF32)
				dt := dtypeOf(mth)
				c := wgradCase{ci: ci, co: co, mth: mth, lim: accBound}
				c.want, _ = refWeightGrad(t, m, roundedF64(mth, xs), roundedF64(mth, dys), ci, co)
				if dt == sparse.Float32 {
					c.want, _ = refWeightGrad(t, m, f64(xs), f64(dys), ci, co)
					c.lim = bound(mth)
				}
				c.x, c.dy = dev(t, m.NIn, ci, xs, dt), dev(t, m.NOut, co, dys, dt)
				if !yield(c) {
					return
				}
			}
		}
	}
}

// TestWeightGradRowSlices checks the weight gradient's window split on
// maps small enough to run it only with its thresholds lowered: slices cut
// at the same output rows in every tap (PairsParams.off; windows of 64
// rows give more slices than chunks of offsets, so some are empty) and,
// for comparison, equal shares of every tap's pairs (EnvNoRowSlices), on
// a submanifold map (mirrored lists and the identity centre), a strided
// and a transposed one, against the float64 reference of the rounded
// inputs, in every arithmetic; and the same bits with the blocks run in
// groups of 1, 4 and 7 splits, long taps first (PairsParams.order_groups;
// partials NaN-filled, so a (tile, tap, split) no block ran shows).
func TestWeightGradRowSlices(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	maps := splitTestMaps(t, rng, 16, grid.Extent{Batch: 1, X: 20, Y: 18, Z: 22}, 0.08)
	setWindow := func(minBytes, rows int64, noRowSlices bool) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.pairsWindowMin, gpu.d.pairsWindowRows, gpu.d.noRowSlices = minBytes, rows, noRowSlices
			return nil
		}))
	}
	defer setWindow(pairsWindowMinBytes, pairsWindowRows, false)
	var orig int64
	require.NoError(t, gpu.d.do(func() error { orig = gpu.d.pairsOrderGroups; return nil }))
	setOrder := func(g int64) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.pairsOrderGroups, gpu.d.poisonPartials = g, g > 0
			return nil
		}))
	}
	defer setOrder(orig)
	setOrder(0)
	split, ordered := 0, 0
	for _, sc := range maps {
		m := sc.m
		V := m.V()
		for c := range wgradCases(t, rng, m) {
			for _, rows := range []int64{64, 1000} {
				s := windowPairsSplits(int64(m.NOut), int64(c.co), int64(c.ci), int64(c.mth.ElemSize()), int64(c.co*V*c.ci), 0, rows)
				if s > 1 {
					split++
				}
				for _, noRowSlices := range []bool{false, true} {
					setWindow(0, rows, noRowSlices)
					name := fmt.Sprintf("%s/ci%d-co%d/%v/window%d-slices%d-noRowSlices%v", sc.name, c.ci, c.co, c.mth, rows, s, noRowSlices)
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}
					dw, err := gpu.WeightGrad(m, c.x, c.dy, o)
					require.NoError(t, err, name)
					got := host(t, dw)
					e := relL2(got, c.want)
					gpu.Free(dw)
					require.LessOrEqual(t, e, c.lim, name)
					// The blocks in groups of splits, long taps first
					// (PairsParams.order_groups): the same partials, the
					// same bits, whatever the groups.
					ordered += requireOrderGroupsBits(t, m, c, o, got, []int64{1, 4, 7}, setOrder,
						func(p pairsParams) bool { return m.Kind == kmap.Submanifold && p.Off != 0 }, name)
					setOrder(0)
				}
			}
			gpu.Free(c.x, c.dy)
		}
	}
	gpu.SetTF32(false)
	require.Greater(t, split, 0, "no case ran the window split")
	require.Greater(t, ordered, 0, "no case ran the window split's blocks in groups")
}

// requireOrderGroupsBits runs c's weight gradient once per order-group
// count of groups (setOrder forces PairsParams.order_groups) and requires
// got's bits every time: the blocks in groups of splits, long taps first,
// write the same partials. It returns how many of the runs the engine
// launched in groups, where grouped says a launch's parameters should
// carry the forced count.
func requireOrderGroupsBits(t *testing.T, m *kmap.Map, c wgradCase, o Options, got []float32, groups []int64,
	setOrder func(int64), grouped func(pairsParams) bool, name string) (ordered int) {
	t.Helper()
	for _, g := range groups {
		setOrder(g)
		dw, err := gpu.WeightGrad(m, c.x, c.dy, o)
		require.NoError(t, err, name)
		var p pairsParams
		require.NoError(t, gpu.d.do(func() error { p = gpu.d.lastPairs; return nil }))
		if grouped(p) {
			require.Equal(t, g, p.OrderGroups, name)
			ordered++
		}
		require.Equal(t, got, host(t, dw), "%s: order groups %d", name, g)
		gpu.Free(dw)
	}
	return ordered
}

// TestReduceFourPerThread checks the split-K reductions' four elements
// per thread (Device.reduceVec, 16-byte loads) against their one element
// per thread, with the threshold lowered so that small maps take it: the
// forward and input gradient (gather splits; the bias added by the
// reduction) and the weight gradient (balanced split, spconv_reduce_taps;
// window split, spconv_reduce) equal the one-element results bit for bit
// — the same sums in the same order — on aligned and unaligned channels
// (13 → 40 keeps one element per thread), in every arithmetic.
func TestReduceFourPerThread(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	maps := splitTestMaps(t, rng, 16, grid.Extent{Batch: 1, X: 20, Y: 18, Z: 22}, 0.08)
	set := func(vecMin, windowMin, windowRows int64) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.reduceVecMin, gpu.d.pairsWindowMin, gpu.d.pairsWindowRows = vecMin, windowMin, windowRows
			return nil
		}))
	}
	launches := deviceCounter(t, func(d *Device) int { return d.reduceVecLaunches })
	defer set(reduceVecMinElems(gpu.d.info.SMs), pairsWindowMinBytes, pairsWindowRows)
	before := launches()
	for _, sc := range maps {
		m := sc.m
		V := m.V()
		for c := range wgradCases(t, rng, m) {
			dt := dtypeOf(c.mth)
			w := dev(t, c.co, V*c.ci, synth.Uniform[float32](rng, c.co*V*c.ci), dt)
			b := dev(t, 1, c.co, synth.Uniform[float32](rng, c.co), dt)
			for _, window := range []bool{false, true} {
				run := func(vecMin int64) [][]float32 {
					windowMin := int64(pairsWindowMinBytes)
					if window {
						windowMin = 0
					}
					set(vecMin, windowMin, 64)
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK, SplitK: 7}}
					y, err := gpu.Forward(m, c.x, w, b, o)
					require.NoError(t, err)
					dx, err := gpu.InputGrad(m, c.dy, w, o)
					require.NoError(t, err)
					dw, err := gpu.WeightGrad(m, c.x, c.dy, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}})
					require.NoError(t, err)
					out := [][]float32{host(t, y), host(t, dx), host(t, dw)}
					gpu.Free(y, dx, dw)
					return out
				}
				one, four := run(math.MaxInt64), run(0)
				for d, dir := range []string{"fwd", "dgrad", "wgrad"} {
					name := fmt.Sprintf("%s/ci%d-co%d/%v/window%v/%s", sc.name, c.ci, c.co, c.mth, window, dir)
					requireSameBits(t, one[d], four[d], name+": four per thread against one")
				}
				// And right: the weight gradient against the float64
				// reference.
				require.LessOrEqual(t, relL2(one[2], c.want), c.lim, "%s/ci%d-co%d/%v/window%v", sc.name, c.ci, c.co, c.mth, window)
			}
			gpu.Free(w, b, c.x, c.dy)
		}
	}
	gpu.SetTF32(false)
	require.Greater(t, launches(), before, "no reduction took four elements per thread")
}

// TestBiasGradShapes checks the bias gradient (column sums of dy) on both
// first stages, the 16-byte loads of spconv_bias_grad1v_* (columns a
// multiple of 16 bytes: every column-group width, one and several column
// tiles, chunks of one row to thousands) and the scalar one (other
// widths), against float64 sums of the rounded inputs, in every storage
// dtype, plus an impulse: a single non-zero row lands in its columns only.
func TestBiasGradShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(35, 36))
	for _, cols := range []int{1, 8, 13, 16, 24, 64, 96, 256, 520, 1024} {
		for _, rows := range []int{1, 7, 255, 4099, 70001} {
			for _, dt := range []sparse.DType{sparse.Float32, sparse.Float16, sparse.BFloat16} {
				mth := kernels.F32
				switch dt {
				case sparse.Float16:
					mth = kernels.F16
				case sparse.BFloat16:
					mth = kernels.BF16
				}
				vals := synth.Uniform[float32](rng, rows*cols)
				in := roundedF64(mth, vals)
				want := make([]float64, cols)
				for r := range rows {
					for c := range cols {
						want[c] += in[r*cols+c]
					}
				}
				name := fmt.Sprintf("rows%d-cols%d-%v", rows, cols, dt)
				dy := dev(t, rows, cols, vals, dt)
				db, err := gpu.BiasGrad(dy)
				require.NoError(t, err, name)
				got := host(t, db)
				gpu.Free(db, dy)
				require.LessOrEqual(t, relL2(got, want), accBound, name)
			}
		}
	}
	// Impulse: row 3000 of 5000 holds 1 … cols, every other row zero.
	const rows, cols = 5000, 64
	vals := make([]float32, rows*cols)
	for c := range cols {
		vals[3000*cols+c] = float32(c + 1)
	}
	dy := dev(t, rows, cols, vals, sparse.Float16)
	db, err := gpu.BiasGrad(dy)
	require.NoError(t, err)
	got := host(t, db)
	gpu.Free(db, dy)
	for c, v := range got {
		require.Equal(t, float32(c+1), v, "column %d", c)
	}
}

// TestWeightGradBalancedSlices checks the balanced weight-gradient split
// (PairsParams.chunk > 0), in which a tap with few pairs uses fewer split
// slices than the longest: its other slices are neither written nor read
// (fg::pairs_tap_slices, spconv_reduce_taps_*). The partials are filled
// with NaN bytes before each launch, so a slice read but never written
// shows in the result, which is compared with the float64 reference for
// mirrored submanifold lists, strided and transposed maps, aligned and
// unaligned channels and every arithmetic; and the same bits with the
// blocks run in groups of 1, 3 and 7 splits, long taps first
// (PairsParams.order_groups, forced). The test asserts that some case
// left slices unused and that some ran in groups.
func TestWeightGradBalancedSlices(t *testing.T) {
	rng := rand.New(rand.NewPCG(33, 34))
	maps := splitTestMaps(t, rng, 24, grid.Extent{Batch: 1, X: 30, Y: 28, Z: 32}, 0.1)
	setPoison := func(on bool) {
		require.NoError(t, gpu.d.do(func() error { gpu.d.poisonPartials = on; return nil }))
	}
	setPoison(true)
	defer setPoison(false)
	var orig int64
	require.NoError(t, gpu.d.do(func() error { orig = gpu.d.pairsOrderGroups; return nil }))
	setOrder := func(g int64) {
		require.NoError(t, gpu.d.do(func() error { gpu.d.pairsOrderGroups = g; return nil }))
	}
	defer setOrder(orig)
	opt := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}
	unused, ordered := 0, 0
	for _, sc := range maps {
		m := sc.m
		V := m.V()
		perTap := make([]int64, V)
		for o := range m.NOut {
			for v, i := range m.Nbr[o*V : o*V+V] {
				if i >= 0 {
					perTap[v]++
				}
			}
		}
		for c := range wgradCases(t, rng, m) {
			name := fmt.Sprintf("%s/ci%d-co%d/%v", sc.name, c.ci, c.co, c.mth)
			dw, err := gpu.WeightGrad(m, c.x, c.dy, opt)
			require.NoError(t, err, name)
			var p pairsParams
			var bk int64
			require.NoError(t, gpu.d.do(func() error { p, bk = gpu.d.lastPairs, gpu.d.lastPairsBK; return nil }))
			if p.Chunk > 0 && p.Splits > 1 {
				for _, n := range perTap {
					iters := (n + bk - 1) / bk
					if pairsTapSlices(iters, p.Chunk, p.Splits) < p.Splits {
						unused++
						break
					}
				}
			}
			got := host(t, dw)
			e := relL2(got, c.want)
			gpu.Free(dw)
			require.False(t, math.IsNaN(e), "%s: a NaN partial was read (splits %d, chunk %d)", name, p.Splits, p.Chunk)
			require.LessOrEqual(t, e, c.lim, "%s (splits %d, chunk %d)", name, p.Splits, p.Chunk)
			// The blocks in groups of splits, long taps first (forced:
			// the engine keeps the launch order for this split): the
			// same partials, the same bits.
			ordered += requireOrderGroupsBits(t, m, c, opt, got, []int64{1, 3, 7}, setOrder,
				func(q pairsParams) bool { return q.Mirror == 1 && q.V == 27 }, name)
			setOrder(orig)
			gpu.Free(c.x, c.dy)
		}
	}
	gpu.SetTF32(false)
	require.Greater(t, unused, 0, "no case left a tap's split slices unused")
	require.Greater(t, ordered, 0, "no case ran the balanced split's blocks in groups")
}

// TestParamGradsFusedBias checks ParamGrads, whose bias gradient the
// 16-bit Hopper pairs kernels sum in their centre tap over the half lists
// of a submanifold map (PairsParams.bias_part) and BiasGrad's kernels
// otherwise, or always with EnvNoFusedBias; with the side stream's
// sections (the default for these small maps) and without (side.maxRows
// lowered to 0). On a submanifold, a strided and a transposed map, with aligned and unaligned channels, no split, user splits, the
// balanced split and the window split in row slices, in every arithmetic,
// and (fused) every pairs tile of a Hopper GPU. The bias gradient is
// compared with the float64 column sums of the rounded dy, the weight
// gradient with the float64 reference and, bit for bit, with WeightGrad's;
// the fused sums are asserted to run exactly where fusesBias says, and a second run repeats the bits. The partials are filled with NaN
// bytes, so a slice read but never written shows. An impulse (one row of
// small integers) comes out exact in every setting.
func TestParamGradsFusedBias(t *testing.T) {
	rng := rand.New(rand.NewPCG(57, 58))
	maps := splitTestMaps(t, rng, 16, grid.Extent{Batch: 1, X: 20, Y: 18, Z: 22}, 0.08)
	type setting struct {
		noFused bool
		maxRows int64
	}
	set := func(poison bool, windowMin, windowRows int64, st setting) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.poisonPartials, gpu.d.pairsWindowMin, gpu.d.pairsWindowRows = poison, windowMin, windowRows
			gpu.d.noFusedBias, gpu.d.side.maxRows = st.noFused, st.maxRows
			return nil
		}))
	}
	var maxRows0 int64
	require.NoError(t, gpu.d.do(func() error { maxRows0 = gpu.d.side.maxRows; return nil }))
	defer set(false, pairsWindowMinBytes, pairsWindowRows, setting{false, maxRows0})
	var tiles []string
	if gpu.d.info.Major == 9 {
		for _, tl := range kernels.HopperTiles {
			if tl.Has(kernels.Pairs, kernels.F16) {
				tiles = append(tiles, tl.Name())
			}
		}
	}
	type split struct {
		name   string
		alg    sparse.Algorithm
		splitK int
		window bool
	}
	splits := []split{
		{"none", sparse.MaskedImplicit, 0, false},
		{"user3", sparse.MaskedImplicitSplitK, 3, false},
		{"balanced", sparse.MaskedImplicitSplitK, 0, false},
		{"window", sparse.MaskedImplicitSplitK, 0, true},
	}
	settings := []setting{{false, maxRows0}, {false, 0}, {true, maxRows0}, {true, 0}}
	fused := 0
	for _, sc := range maps {
		m := sc.m
		subm := m.Kind == kmap.Submanifold
		for _, ch := range [][2]int{{64, 64}, {13, 72}, {128, 256}} {
			ci, co := ch[0], ch[1]
			xs := synth.Uniform[float32](rng, m.NIn*ci)
			dys := synth.Uniform[float32](rng, m.NOut*co)
			for _, mth := range kernels.Maths {
				gpu.SetTF32(mth == kernels.TF32)
				dt := dtypeOf(mth)
				xr, dyr := roundedF64(mth, xs), roundedF64(mth, dys)
				lim := accBound
				if dt == sparse.Float32 {
					xr, dyr, lim = f64(xs), f64(dys), bound(mth)
				}
				wantDW, wantDB := refWeightGrad(t, m, xr, dyr, ci, co)
				x, dy := dev(t, m.NIn, ci, xs, dt), dev(t, m.NOut, co, dys, dt)
				for si, st := range settings {
					for _, tile := range append([]string{""}, tiles...) {
						if tile != "" && (mth.ElemSize() != 2 || si > 0) {
							continue
						}
						for _, sp := range splits {
							if sp.window {
								set(true, 0, 64, st)
							} else {
								set(true, pairsWindowMinBytes, pairsWindowRows, st)
							}
							name := fmt.Sprintf("%s/ci%d-co%d/%v/noFused%v-maxRows%d/%s/%s", sc.name, ci, co, mth, st.noFused, st.maxRows, tile, sp.name)
							o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sp.alg, SplitK: sp.splitK}, Tile: tile}
							dw, db, err := gpu.ParamGrads(m, x, dy, o)
							require.NoError(t, err, name)
							var p pairsParams
							require.NoError(t, gpu.d.do(func() error { p = gpu.d.lastPairs; return nil }))
							chosen, err := gpu.chooseTile(o, mth, usePairs, int64(co), int64(ci), int64(m.NOut), 1)
							require.NoError(t, err, name)
							want := subm && fusesBias(chosen, mth, true) && !st.noFused
							require.Equal(t, want, p.BiasPart != 0, "%s: fused bias sums (tile %s)", name, chosen.Name())
							if want {
								fused++
							}
							gotDB := host(t, db)
							require.Equal(t, []int{1, co}, []int{db.Rows, db.Cols}, name)
							require.Equal(t, sparse.Float32, storageDType(t, db), name)
							require.LessOrEqual(t, relL2(gotDB, wantDB), accBound, "%s: bias (splits %d, chunk %d)", name, p.Splits, p.Chunk)
							gotDW := host(t, dw)
							require.LessOrEqual(t, relL2(gotDW, wantDW), lim, "%s: weight", name)
							dw2, err := gpu.WeightGrad(m, x, dy, o)
							require.NoError(t, err, name)
							require.Equal(t, gotDW, host(t, dw2), "%s: the weight gradient of ParamGrads is WeightGrad's", name)
							dw3, db3, err := gpu.ParamGrads(m, x, dy, o)
							require.NoError(t, err, name)
							require.Equal(t, gotDB, host(t, db3), "%s: a second run repeats the bias bits", name)
							gpu.Free(dw, db, dw2, dw3, db3)
						}
					}
				}
				gpu.Free(x, dy)
			}
		}
	}
	gpu.SetTF32(false)
	if gpu.d.info.Major == 9 {
		require.Greater(t, fused, 0, "no case summed the bias in the weight gradient")
	}

	// Impulse: dy is zero but for one row of 1 … co (exact in 16 bits).
	m := maps[0].m
	const ci, co = 64, 128
	for _, mth := range []kernels.Math{kernels.F16, kernels.BF16} {
		dys := make([]float32, m.NOut*co)
		r := m.NOut / 2
		for c := range co {
			dys[r*co+c] = float32(c + 1)
		}
		x := dev(t, m.NIn, ci, synth.Uniform[float32](rng, m.NIn*ci), dtypeOf(mth))
		dy := dev(t, m.NOut, co, dys, dtypeOf(mth))
		for _, st := range settings {
			set(false, pairsWindowMinBytes, pairsWindowRows, st)
			dw, db, err := gpu.ParamGrads(m, x, dy, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}})
			require.NoError(t, err)
			for c, v := range host(t, db) {
				require.Equal(t, float32(c+1), v, "%v impulse, noFused %v, maxRows %d: column %d", mth, st.noFused, st.maxRows, c)
			}
			gpu.Free(dw, db)
		}
		gpu.Free(x, dy)
	}
}

// TestWeightGradFloat16Overflow is the loss-scaling case: float16 inputs
// whose weight and bias gradients exceed 65504, the largest float16. The
// narrow results overflow to infinity (a dynamic loss scaler would skip the
// step); the float32 ones are finite and accurate.
func TestWeightGradFloat16Overflow(t *testing.T) {
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(31, 32))
	coords, ext := synth.SphereShell(16, 1)
	m := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	const ci, co, scale = 16, 24, 1024
	xs := make([]float32, m.NIn*ci)
	for i := range xs {
		xs[i] = float32(rng.Float64()) // positive: sums do not cancel
	}
	dys := make([]float32, m.NOut*co)
	for i := range dys {
		dys[i] = scale * float32(rng.Float64())
	}
	mth := kernels.F16
	dwR, dbR := refWeightGrad(t, m, roundedF64(mth, xs), roundedF64(mth, dys), ci, co)
	big := 0.0
	for _, v := range dwR {
		big = max(big, math.Abs(v))
	}
	require.Greater(t, big, 65504.0, "the scene must push the weight gradient beyond float16")
	x := dev(t, m.NIn, ci, xs, sparse.Float16)
	dy := dev(t, m.NOut, co, dys, sparse.Float16)
	defer gpu.Free(x, dy)
	for _, c := range wgrad32Cases {
		o := Options{ConvOptions: c.opt}
		dw, err := gpu.WeightGrad(m, x, dy, o)
		require.NoError(t, err, c.name)
		h := host(t, dw)
		gpu.Free(dw)
		for i, v := range h {
			require.Falsef(t, math.IsInf(float64(v), 0) || math.IsNaN(float64(v)), "%s: element %d is %g", c.name, i, v)
		}
		e := relL2(h, dwR)
		results.add(variantKey{c.opt.Algorithm, "wgrad32", mth, "overflow/" + c.name}, "shell16-overflow", e)
		require.LessOrEqual(t, e, accBound, c.name)

		o.NarrowWeightGrad = true
		dwN, err := gpu.WeightGrad(m, x, dy, o)
		require.NoError(t, err, c.name)
		hN := host(t, dwN)
		gpu.Free(dwN)
		inf := 0
		for _, v := range hN {
			if math.IsInf(float64(v), 1) {
				inf++
			}
		}
		require.Positive(t, inf, "%s: the float16 result should overflow (largest reference value %g)", c.name, big)
	}
	db, err := gpu.BiasGrad(dy)
	require.NoError(t, err)
	hb := host(t, db)
	gpu.Free(db)
	require.LessOrEqual(t, relL2(hb, dbR), accBound)
	require.Greater(t, float64(slicesMax(hb)), 65504.0)
	dbN, err := gpu.BiasGradAs(dy, sparse.Float16)
	require.NoError(t, err)
	require.True(t, math.IsInf(float64(slicesMax(host(t, dbN))), 1), "the float16 bias gradient overflows")
	gpu.Free(dbN)
	_, err = gpu.BiasGradAs(dy, sparse.BFloat16)
	require.ErrorIs(t, err, sparse.ErrDType, "a float16 dy has no bfloat16 bias gradient")
}

func slicesMax(a []float32) float32 {
	m := float32(math.Inf(-1))
	for _, v := range a {
		m = max(m, v)
	}
	return m
}

// TestDeterministic runs split-K variants twice and requires equal bits.
func TestDeterministic(t *testing.T) {
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(11, 12))
	coords, ext := synth.SphereShell(16, 1)
	m := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	ci, co, V := 32, 48, m.V()
	for _, mth := range []kernels.Math{kernels.F32, kernels.F16} {
		dt := dtypeOf(mth)
		x := dev(t, m.NIn, ci, synth.Uniform[float32](rng, m.NIn*ci), dt)
		w := dev(t, co, V*ci, synth.Uniform[float32](rng, co*V*ci), dt)
		dy := dev(t, m.NOut, co, synth.Uniform[float32](rng, m.NOut*co), dt)
		for _, alg := range []sparse.Algorithm{sparse.ImplicitSplitK, sparse.MaskedImplicitSplitK} {
			o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg, SplitK: 5}}
			var prev [3][]float32
			for rep := range 2 {
				y, err := gpu.Forward(m, x, w, sparse.Matrix{}, o)
				require.NoError(t, err)
				dx, err := gpu.InputGrad(m, dy, w, o)
				require.NoError(t, err)
				dw, err := gpu.WeightGrad(m, x, dy, o)
				require.NoError(t, err)
				cur := [3][]float32{host(t, y), host(t, dx), host(t, dw)}
				gpu.Free(y, dx, dw)
				if rep == 1 {
					for i := range cur {
						require.Equal(t, len(prev[i]), len(cur[i]))
						for j := range cur[i] {
							require.Equalf(t, math.Float32bits(prev[i][j]), math.Float32bits(cur[i][j]), "%v %v output %d element %d", alg, mth, i, j)
						}
					}
				}
				prev = cur
			}
		}
		gpu.Free(x, w, dy)
	}
}

// TestEngineRoutes checks that sparse.Conv routes device matrices to the
// engine and host matrices to the CPU, and that errors are clear.
func TestEngineRoutes(t *testing.T) {
	m := shell8Map(t)
	rng := rand.New(rand.NewPCG(3, 4))
	ref := cpuReference(t, rng, m, 8, 16)
	x := dev(t, m.NIn, 8, ref.x, sparse.Float32)
	w := dev(t, 16, 27*8, ref.w, sparse.Float32)
	b := dev(t, 1, 16, ref.b, sparse.Float32)
	e, err := sparse.EngineFor(x, w, b)
	require.NoError(t, err)
	require.Equal(t, "cuda:0", e.Name())
	y, err := sparse.Conv(m, x, w, b, sparse.ConvOptions{})
	require.NoError(t, err)
	require.Less(t, relL2(host(t, y), ref.y), 1e-5)

	// Mixed host/device data has no engine.
	_, err = sparse.Conv(m, x, sparse.Matrix{Rows: 16, Cols: 27 * 8, Data: ref.w}, sparse.Matrix{}, sparse.ConvOptions{})
	require.ErrorIs(t, err, sparse.ErrNoEngine)
	// Freed buffers are rejected.
	gpu.Free(b)
	_, err = gpu.Forward(m, x, w, b, Options{})
	require.ErrorIs(t, err, ErrFreed)
	// Bad tile names and shapes are errors, not panics.
	_, err = gpu.Forward(m, x, w, sparse.Matrix{}, Options{Tile: "m1n1k1w1x1s1"})
	require.ErrorIs(t, err, sparse.ErrShape)
	_, err = gpu.Forward(m, x, x, sparse.Matrix{}, Options{})
	require.ErrorIs(t, err, sparse.ErrShape)
	_, err = gpu.Forward(m, x, w, sparse.Matrix{}, Options{ConvOptions: sparse.ConvOptions{TileRows: 7}})
	require.ErrorIs(t, err, sparse.ErrShape)
	// Host round trip of every dtype.
	for _, dt := range []sparse.DType{sparse.Float32, sparse.Float16, sparse.BFloat16} {
		h := host(t, dev(t, 3, 5, ref.x[:15], dt))
		for i, v := range h {
			want := ref.x[i]
			switch dt {
			case sparse.Float16:
				want = HalfBitsToFloat32(Float32ToHalfBits(want))
			case sparse.BFloat16:
				want = BFloat16BitsToFloat32(Float32ToBFloat16Bits(want))
			}
			require.Equal(t, want, v, "%v element %d", dt, i)
		}
	}
	gpu.Free(x, w, y)
}

// TestOutOfMemory asks for more memory than the GPU has.
func TestOutOfMemory(t *testing.T) {
	_, err := gpu.Alloc(sparse.Float32, int(gpu.Info().TotalMem/4), 2)
	require.ErrorIs(t, err, ErrOutOfMemory)
	require.Contains(t, err.Error(), fmt.Sprint(gpu.Info().TotalMem/4*2*4))
}

// TestOffsets64 gathers input rows whose element offset row·C exceeds 2^31
// in every direction (x is [2.2M, 1032], ≈ 9.1 GB in float32).
func TestOffsets64(t *testing.T) {
	if testing.Short() {
		t.Skip("large allocation")
	}
	const (
		nIn   = 2_200_000
		c     = 1032
		nOut  = 512
		co    = 16
		touch = 20000 // only the last touch input rows are referenced
	)
	require.Greater(t, int64(nIn-touch)*c, int64(1)<<31)
	rng := rand.New(rand.NewPCG(5, 6))
	conv := grid.Conv{Kernel: [3]int{3, 1, 1}, Stride: [3]int{1, 1, 1}, Dilation: [3]int{1, 1, 1}}
	V := conv.Volume()
	m := &kmap.Map{Kind: kmap.Strided, Conv: conv, NIn: nIn, NOut: nOut, Nbr: make([]int32, nOut*V)}
	used := map[int32]bool{}
	for o := range nOut {
		for v := range V {
			m.Nbr[o*V+v] = -1
			if rng.IntN(4) > 0 {
				i := int32(nIn - touch + rng.IntN(touch))
				if !used[i*int32(V)+int32(v)] { // keep (i, v) → o unique
					used[i*int32(V)+int32(v)] = true
					m.Nbr[o*V+v] = i
				}
			}
		}
	}
	xs := synth.Uniform[float32](rng, touch*c) // rows nIn-touch … nIn-1
	wv := synth.Uniform[float32](rng, co*V*c)
	dyv := synth.Uniform[float32](rng, nOut*co)
	xrow := func(i int32) []float32 { j := int(i) - (nIn - touch); return xs[j*c : j*c+c] }
	// float64 references over the touched rows.
	y := make([]float64, nOut*co)
	dxTail := make([]float64, touch*c)
	dw := make([]float64, co*V*c)
	for o := range nOut {
		for v := range V {
			i := m.Nbr[o*V+v]
			if i < 0 {
				continue
			}
			xr := xrow(i)
			for k := range co {
				var s float64
				wr := wv[(k*V+v)*c : (k*V+v)*c+c]
				for a := range c {
					s += float64(wr[a]) * float64(xr[a])
					dw[(k*V+v)*c+a] += float64(dyv[o*co+k]) * float64(xr[a])
				}
				y[o*co+k] += s
				j := int(i) - (nIn - touch)
				for a := range c {
					dxTail[j*c+a] += float64(dyv[o*co+k]) * float64(wr[a])
				}
			}
		}
	}
	for _, mth := range []kernels.Math{kernels.F32, kernels.F16} {
		dt := dtypeOf(mth)
		x, err := gpu.Alloc(dt, nIn, c)
		require.NoError(t, err)
		require.NoError(t, gpu.Fill(x, float32(math.NaN()))) // untouched rows must never be read
		uploadRows(t, x, nIn-touch, xs)
		w := dev(t, co, V*c, wv, dt)
		dy := dev(t, nOut, co, dyv, dt)
		for _, alg := range []sparse.Algorithm{sparse.Explicit, sparse.Implicit, sparse.MaskedImplicitSplitK} {
			o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}}
			name := fmt.Sprintf("offsets64 %v %v", alg, mth)
			got, err := gpu.Forward(m, x, w, sparse.Matrix{}, o)
			require.NoError(t, err, name)
			e := relL2(host(t, got), y)
			results.add(variantKey{alg, "fwd64", mth, "auto"}, "offsets64", e)
			require.LessOrEqual(t, e, bound(mth), name)
			gpu.Free(got)

			got, err = gpu.InputGrad(m, dy, w, o)
			require.NoError(t, err, name)
			tail := downloadRows(t, got, nIn-touch, touch)
			head := downloadRows(t, got, 0, 1000)
			e = relL2(tail, dxTail)
			results.add(variantKey{alg, "dgrd64", mth, "auto"}, "offsets64", e)
			require.LessOrEqual(t, e, bound(mth), name)
			for i, v := range head {
				require.Zerof(t, v, "%s: dx element %d of an untouched row", name, i)
			}
			gpu.Free(got)

			got, err = gpu.WeightGrad(m, x, dy, o)
			require.NoError(t, err, name)
			e = relL2(host(t, got), dw)
			results.add(variantKey{alg, "wgrd64", mth, "auto"}, "offsets64", e)
			require.LessOrEqual(t, e, bound(mth), name)
			gpu.Free(got)
		}
		gpu.Free(x, w, dy)
		gpu.ForgetMap(m)
		require.NoError(t, gpu.ReleaseCache())
	}
}

// uploadRows copies float32 rows into a device matrix from row r0 on,
// converting to its dtype.
func uploadRows(t *testing.T, m sparse.Matrix, r0 int, data []float32) {
	b, err := gpu.buffer(m, "m")
	require.NoError(t, err)
	d := gpu.d
	off := int64(r0) * int64(m.Cols) * int64(b.dtype.Size())
	require.NoError(t, d.do(func() error {
		tmp, err := d.allocTemp(int64(len(data)) * 4)
		if err != nil {
			return err
		}
		defer d.freeTemp(tmp)
		if err := memcpyHtoD(tmp.ptr, unsafe.Pointer(&data[0]), int64(len(data))*4, d.stream); err != nil {
			return err
		}
		return d.convert(tmp.ptr, sparse.Float32, b.ptr+devPtr(off), b.dtype, int64(len(data)))
	}))
}

// downloadRows returns rows [r0, r0+n) of a device float matrix as float32.
func downloadRows(t *testing.T, m sparse.Matrix, r0, n int) []float32 {
	b, err := gpu.buffer(m, "m")
	require.NoError(t, err)
	d := gpu.d
	cnt := int64(n) * int64(m.Cols)
	out := make([]float32, cnt)
	off := int64(r0) * int64(m.Cols) * int64(b.dtype.Size())
	require.NoError(t, d.do(func() error {
		tmp, err := d.allocTemp(cnt * 4)
		if err != nil {
			return err
		}
		defer d.freeTemp(tmp)
		if err := d.convert(b.ptr+devPtr(off), b.dtype, tmp.ptr, sparse.Float32, cnt); err != nil {
			return err
		}
		return memcpyDtoH(unsafe.Pointer(&out[0]), tmp.ptr, cnt*4, d.stream)
	}))
	return out
}

// benchConv times one direction of a convolution with CUDA events
// (device time per call, after b.Loop's warm-up) and reports useful
// TFLOP/s = 2·pairs·Ci·Co / time.
func benchConv(b *testing.B, m *kmap.Map, c int, mth kernels.Math, dir string, o Options) {
	x, w, dy := benchInputs(b, m, c, mth)
	defer gpu.Free(x, w, dy)
	benchConvOn(b, m, c, mth, dir, o, x, w, dy)
}

// benchInputs uploads random x [NIn, c], weight [c, V·c] and dy [NOut, c]
// of arithmetic mth for benchConvOn.
func benchInputs(b *testing.B, m *kmap.Map, c int, mth kernels.Math) (x, w, dy sparse.Matrix) {
	rng := rand.New(rand.NewPCG(1, 1))
	dt := dtypeOf(mth)
	V := m.V()
	x = dev(b, m.NIn, c, synth.Uniform[float32](rng, m.NIn*c), dt)
	w = dev(b, c, V*c, synth.Weights[float32](rng, c, V, c), dt)
	dy = dev(b, m.NOut, c, synth.Uniform[float32](rng, m.NOut*c), dt)
	return x, w, dy
}

// benchConvOn is benchConv on inputs of benchInputs.
func benchConvOn(b *testing.B, m *kmap.Map, c int, mth kernels.Math, dir string, o Options, x, w, dy sparse.Matrix) {
	ok := gpu.poison.Swap(false)
	defer gpu.poison.Store(ok)
	gpu.SetTF32(mth == kernels.TF32)
	defer gpu.SetTF32(false)
	run := func() sparse.Matrix {
		var out sparse.Matrix
		var err error
		switch dir {
		case "fwd":
			out, err = gpu.Forward(m, x, w, sparse.Matrix{}, o)
		case "dgrad":
			out, err = gpu.InputGrad(m, dy, w, o)
		default:
			out, err = gpu.WeightGrad(m, x, dy, o)
		}
		require.NoError(b, err)
		return out
	}
	gpu.Free(run()) // uploads the tables
	timer, err := gpu.NewTimer()
	require.NoError(b, err)
	defer timer.Destroy()
	batch := benchBatch(b)
	outs := make([]sparse.Matrix, batch)
	var ms float64
	for b.Loop() {
		require.NoError(b, timer.Start())
		for i := range outs {
			outs[i] = run()
		}
		t, err := timer.Stop()
		require.NoError(b, err)
		ms += float64(t)
		gpu.Free(outs...)
	}
	per := ms / float64(b.N*batch)
	b.ReportMetric(per, "device-ms/op")
	b.ReportMetric(2*float64(m.Pairs().Count())*float64(c*c)/(per*1e-3)/1e12, "TFLOP/s")
}

// BenchmarkConv times forward, input and weight gradients on FlexGEMM's
// sphere-shell scenes with the default algorithm (masked implicit split-K).
func BenchmarkConv(b *testing.B) {
	ok := mapOK(b)
	for _, sc := range []struct{ res, c int }{{128, 64}, {32, 256}} {
		coords, ext := synth.SphereShell(sc.res, 1)
		m := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
		for _, mth := range kernels.Maths {
			for _, dir := range []string{"fwd", "dgrad", "wgrad"} {
				b.Run(fmt.Sprintf("res%d-c%d/%v/%s", sc.res, sc.c, mth, dir), func(b *testing.B) {
					benchConv(b, m, sc.c, mth, dir, Options{})
				})
			}
		}
	}
}

// BenchmarkConvTiles times each direction of one convolution layer with
// every tile of the table forced (Options.Tile; algorithm masked implicit
// split-K, the bench's, with the engine's split heuristic; the weight
// gradient runs the pairs kernels of implicit split-K) on FlexGEMM's
// sphere shells, one sub-benchmark per (config, direction, tile):
// res<RES>-c<C>/<dir>/<tile>, metrics device-ms/op and useful TFLOP/s
// (2·pairs·C² per call). Configs from FLEXGEMM_BENCH_CFGS ("RES,C;…" or
// FlexGEMM's "RES,C,L;…", L ignored; default 64,1024;256,256;1024,64),
// arithmetic from FLEXGEMM_BENCH_MATH (default f16), tiles narrowed by
// FLEXGEMM_TEST_TILES. Tiles the arithmetic lacks are skipped; the
// weight gradient's result is float32 unless FLEXGEMM_BENCH_NARROW_WGRAD=1
// asks for the operands' dtype (as the bench's 16-bit training steps do);
// FLEXGEMM_BENCH_BATCH calls are timed together (benchBatch).
// Run with a fixed count, e.g. -test.benchtime=20x.
func BenchmarkConvTiles(b *testing.B) {
	ok := mapOK(b)
	cfgs := os.Getenv("FLEXGEMM_BENCH_CFGS")
	if cfgs == "" {
		cfgs = "64,1024;256,256;1024,64"
	}
	mth := kernels.F16
	if name := os.Getenv("FLEXGEMM_BENCH_MATH"); name != "" {
		i := slices.IndexFunc(kernels.Maths, func(m kernels.Math) bool { return m.String() == name })
		require.GreaterOrEqual(b, i, 0, "FLEXGEMM_BENCH_MATH %q", name)
		mth = kernels.Maths[i]
	}
	narrowWGrad := os.Getenv("FLEXGEMM_BENCH_NARROW_WGRAD") == "1"
	for _, cfg := range strings.Split(cfgs, ";") {
		f := strings.Split(strings.TrimSpace(cfg), ",")
		require.GreaterOrEqual(b, len(f), 2, "FLEXGEMM_BENCH_CFGS entry %q", cfg)
		res, err := strconv.Atoi(f[0])
		require.NoError(b, err)
		c, err := strconv.Atoi(f[1])
		require.NoError(b, err)
		coords, ext := synth.SphereShell(res, 1)
		m := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
		x, w, dy := benchInputs(b, m, c, mth)
		for _, dir := range []string{"fwd", "dgrad", "wgrad"} {
			for _, tile := range kernels.AllTiles() {
				if !tile.Supports(mth) || !envSelected("FLEXGEMM_TEST_TILES", tile.Name()) ||
					(tile.Hopper && ((dir == "wgrad" && !tile.Has(kernels.Pairs, mth)) || !gpu.d.hopperTiles(mth))) {
					continue
				}
				for _, splits := range benchSplits(b, dir) {
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK, SplitK: splits,
						NarrowWeightGrad: narrowWGrad}, Tile: tile.Name()}
					name := fmt.Sprintf("res%d-c%d/%s/%s", res, c, dir, tile.Name())
					if splits > 0 {
						name += fmt.Sprintf("/splitk=%d", splits)
					}
					b.Run(name, func(b *testing.B) {
						benchConvOn(b, m, c, mth, dir, o, x, w, dy)
					})
				}
			}
		}
		gpu.Free(x, w, dy)
		gpu.ReleaseMap(m)
	}
}

// benchBatch returns the calls benchConvOn times between one pair of
// events: FLEXGEMM_BENCH_BATCH, default 1. With one call a timing holds
// the host's time to queue it: the RES 8 C 1024 forward read 57 µs a call
// here, 39 µs a call in a stack of 16 queued layers, and its kernel 35 µs
// under Nsight Compute (docs/PERF_NOTES.md, fifty-sixth session). A batch
// of queued calls spreads the queueing over the batch, so small kernels
// compare by their device time.
func benchBatch(b *testing.B) int {
	v := os.Getenv("FLEXGEMM_BENCH_BATCH")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, "FLEXGEMM_BENCH_BATCH %q", v)
	require.Positive(b, n, "FLEXGEMM_BENCH_BATCH %q", v)
	return n
}

// benchSplits returns the split-K factors BenchmarkConvTiles times
// direction dir with: a comma list (0: the heuristic's) from
// FLEXGEMM_BENCH_SPLITS for the weight gradient and from
// FLEXGEMM_BENCH_GATHER_SPLITS for the forward and input gradient, or the
// heuristic's alone.
func benchSplits(b *testing.B, dir string) []int {
	env := "FLEXGEMM_BENCH_SPLITS"
	if dir != "wgrad" {
		env = "FLEXGEMM_BENCH_GATHER_SPLITS"
	}
	v := os.Getenv(env)
	if v == "" {
		return []int{0}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		require.NoError(b, err, "%s %q", env, v)
		require.GreaterOrEqual(b, n, 0, "%s %q", env, v)
		out = append(out, n)
	}
	return out
}

// BenchmarkConvAlgorithms compares the algorithms in float16 on the res-128
// shell with C = 64.
func BenchmarkConvAlgorithms(b *testing.B) {
	ok := mapOK(b)
	coords, ext := synth.SphereShell(128, 1)
	m := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	for _, alg := range sparse.Algorithms {
		for _, dir := range []string{"fwd", "dgrad", "wgrad"} {
			b.Run(fmt.Sprintf("%v/%s", alg, dir), func(b *testing.B) {
				benchConv(b, m, 64, kernels.F16, dir, Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}})
			})
		}
	}
}

// TestPersistentGathers checks the persistent warp-specialised gathers
// (EnvPersistentGathers: a block per SM taking its next tile from a
// counter while it stores the last) bit for bit against a block per tile:
// each tile's products are the same whichever block runs it. Forward and
// input gradient of every warp-specialised tile alone on its SM, masked
// and unmasked, with the row tiles launched in index order, longest first
// and by first rows, on maps of more row tiles than SMs; the float64
// comparison of the same kernels is TestConvSweep's.
func TestPersistentGathers(t *testing.T) {
	skipWithoutHopper(t)
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(22, 2))
	var scenes []scene
	for _, res := range []int{72, 80} { // 155 and 192 row tiles of 128: more than the SMs
		coords, ext := synth.SphereShell(res, 1)
		m := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
		require.Greater(t, ceilDiv(int64(m.NOut), 128), int64(gpu.d.info.SMs))
		scenes = append(scenes, scene{fmt.Sprintf("shell%d-subm3", res), m})
	}
	rext := grid.Extent{Batch: 2, X: 64, Y: 60, Z: 56}
	scenes = append(scenes, scene{"random-strided-k3s2", ok(kmap.NewStrided(synth.RandomScene(rng, rext, 0.5), rext, grid.Cube(3, 2, 1, 1), nil))})

	type order struct {
		name    string
		perSM   int
		rowsMin int64
	}
	orders := []order{{"index", 0, 1 << 40}, {"longest-first", 1 << 20, 1 << 40}, {"rows-first", 0, 0}}
	setOrder := func(o order) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.longestFirstTilesPerSM, gpu.d.longestFirstTilesPerSMTF32, gpu.d.rowsFirstMin = o.perSM, o.perSM, o.rowsMin
			return nil
		}))
	}
	defer func() {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.longestFirstTilesPerSM, gpu.d.longestFirstTilesPerSMTF32, gpu.d.rowsFirstMin = longestFirstTilesPerSM, longestFirstTilesPerSMTF32, rowsFirstMinRows
			return nil
		}))
	}()
	was := persistentGathers.Load()
	defer persistentGathers.Store(was)

	var tiles []kernels.Tile
	for _, tile := range kernels.HopperTiles {
		if tile.Producers > 0 && envSelected("FLEXGEMM_TEST_TILES", tile.Name()) {
			tiles = append(tiles, tile)
		}
	}
	require.NotEmpty(t, tiles)
	const ci, co = 72, 136 // two K stages per tap forward; dgrad reads 136 columns
	for _, sc := range scenes {
		V := sc.m.V()
		for _, mth := range []kernels.Math{kernels.F16, kernels.BF16, kernels.TF32} {
			gpu.SetTF32(mth == kernels.TF32)
			dt := dtypeOf(mth)
			x := dev(t, sc.m.NIn, ci, synth.Uniform[float32](rng, sc.m.NIn*ci), dt)
			w := dev(t, co, V*ci, synth.Uniform[float32](rng, co*V*ci), dt)
			dy := dev(t, sc.m.NOut, co, synth.Uniform[float32](rng, sc.m.NOut*co), dt)
			for _, ord := range orders {
				setOrder(ord)
				gpu.ReleaseMap(sc.m) // the launch order is part of the cached tile tables
				for _, tile := range tiles {
					if !tile.Supports(mth) {
						continue
					}
					for _, alg := range []sparse.Algorithm{sparse.MaskedImplicit, sparse.Implicit} {
						name := fmt.Sprintf("%s/%v/%s/%v/%s", sc.name, mth, ord.name, alg, tile.Name())
						run := func(persistent bool) [2][]float32 {
							persistentGathers.Store(persistent)
							o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}, Tile: tile.Name()}
							return forwardAndInputGrad(t, sc.m, x, w, sparse.Matrix{}, dy, o, tile.HasTransposed(mth), name)
						}
						got, want := run(true), run(false)
						for d := range got {
							requireSameBits(t, want[d], got[d], fmt.Sprintf("%s: direction %d: persistent against a block per tile", name, d))
						}
					}
				}
			}
			gpu.Free(x, w, dy)
		}
		gpu.SetTF32(false)
		gpu.ReleaseMap(sc.m)
	}
}

// forwardAndInputGrad runs the forward of map m (bias b, or none when
// empty) and, when grad, the input gradient of dy, with options o; it
// returns both on the host (the second nil without grad). name labels
// failures. The tile tests pass grad where their tile has a kernel
// reading the weight transposed (kernels.Tile.HasTransposed).
func forwardAndInputGrad(t *testing.T, m *kmap.Map, x, w, b, dy sparse.Matrix, o Options, grad bool, name string) [2][]float32 {
	t.Helper()
	y, err := gpu.Forward(m, x, w, b, o)
	require.NoError(t, err, name)
	out := [2][]float32{host(t, y)}
	gpu.Free(y)
	if grad {
		dx, err := gpu.InputGrad(m, dy, w, o)
		require.NoError(t, err, name)
		out[1] = host(t, dx)
		gpu.Free(dx)
	}
	return out
}

// twinAlgorithms are the algorithms the twin tests run checkTwin with:
// both GEMMs unsplit (the engine's own split count) and both split-K
// forms with forced splits of 3 and 5 (a split's share may start inside a
// tap).
var twinAlgorithms = []struct {
	alg    sparse.Algorithm
	splits int
}{{sparse.Implicit, 0}, {sparse.MaskedImplicit, 0}, {sparse.ImplicitSplitK, 3}, {sparse.MaskedImplicitSplitK, 5}}

// sceneChannels is a scene of the twin tests and the (input, output)
// channel counts they run on it.
type sceneChannels struct {
	scene
	channels [][2]int
}

// twinScenes returns the twin tests' three scenes, each with the channel
// counts given for it: the small shell (shell8Map), a random submanifold
// scene drawn from rng, and a shell of more tiles than resident blocks
// (persistent blocks).
func twinScenes(t *testing.T, rng *rand.Rand, shell8, random, shell64 [][2]int) []sceneChannels {
	t.Helper()
	ok := mapOK(t)
	rext := grid.Extent{Batch: 1, X: 14, Y: 12, Z: 10}
	big, bigExt := synth.SphereShell(64, 2)
	return []sceneChannels{
		{scene{"shell8-subm3", shell8Map(t)}, shell8},
		{scene{"random-subm3", ok(kmap.NewSubmanifold(synth.RandomScene(rng, rext, 0.3), rext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))}, random},
		{scene{"shell64b2-subm3", ok(kmap.NewSubmanifold(big, bigExt, [3]int{3, 3, 3}, [3]int{1, 1, 1}))}, shell64},
	}
}

// mathTile is an arithmetic and a tile a twin test runs.
type mathTile struct {
	mth  kernels.Math
	tile kernels.Tile
}

// twinCases returns the (arithmetic, Hopper tile) pairs for which has
// reports a twin (kernels.Tile.HasSwapped and the like), of the tiles
// FLEXGEMM_TEST_TILES selects; none is an error.
func twinCases(t *testing.T, has func(kernels.Tile, kernels.Math) bool) []mathTile {
	t.Helper()
	var cases []mathTile
	for _, tile := range kernels.HopperTiles {
		for _, mth := range kernels.Maths {
			if has(tile, mth) && envSelected("FLEXGEMM_TEST_TILES", tile.Name()) {
				cases = append(cases, mathTile{mth, tile})
			}
		}
	}
	require.NotEmpty(t, cases)
	return cases
}

// checkTwin runs the forward and input gradient of map m with options o
// twice: with a twin kernel's switch off (set), when it must not run
// (launches counts its launches), then on, when it must run wantRuns
// times; the twin's results must be within bnd of the float64 reference
// ref and of the switched-off run's. name labels failures.
func checkTwin(t *testing.T, m *kmap.Map, x, w, b, dy sparse.Matrix, o Options, ref *reference, bnd float64,
	set func(bool), launches func() int, wantRuns int, name string) {
	t.Helper()
	set(false)
	before := launches()
	want := forwardAndInputGrad(t, m, x, w, b, dy, o, true, name)
	require.Equal(t, before, launches(), "%s: switched off, no twin runs", name)
	set(true)
	got := forwardAndInputGrad(t, m, x, w, b, dy, o, true, name)
	require.Equal(t, before+wantRuns, launches(), "%s: the twin runs where the gather allows it", name)
	for d, r := range [][]float64{ref.y, ref.dx} {
		e := relL2(got[d], r)
		require.LessOrEqual(t, e, bnd, "%s direction %d: error %g against float64", name, d, e)
		r32 := make([]float64, len(want[d]))
		for i, v := range want[d] {
			r32[i] = float64(v)
		}
		e = relL2(got[d], r32)
		require.LessOrEqual(t, e, bnd, "%s direction %d: error %g against the plain kernel", name, d, e)
	}
}

// TestStreamKGathers checks the stream-K gathers (gather_ws.cuh) of every
// warp-specialised tile alone on its SM against the float64 reference,
// forward with a bias and input gradient, both split-K algorithms, f16,
// bf16 and tf32: on the engine's own blocks (a shell of 155 row tiles, in
// streamK's range at eight tiles per SM) and forced onto fewer blocks than tiles (pieces that
// end tiles, whole tiles, tiles cut in two), more blocks than tiles (tiles
// cut in three or more: a start adding several blocks' partials), and more
// blocks than iterations (blocks with empty shares, which store zero
// partials); a second launch must repeat the bits, and the result must be
// within the arithmetic's bound of the tile-per-block launch's.
func TestStreamKGathers(t *testing.T) {
	skipWithoutHopper(t)
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(23, 1))
	sms := gpu.d.info.SMs
	type sceneBlocks struct {
		scene
		blocks []int // 0: the engine's choice
	}
	var scenes []sceneBlocks
	coords, ext := synth.SphereShell(72, 1)
	big := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	require.GreaterOrEqual(t, 2*ceilDiv(int64(big.NOut), 128), int64(sms))
	scenes = append(scenes, sceneBlocks{scene{"shell72-subm3", big}, []int{0, 7}})
	coords, ext = synth.SphereShell(16, 2)
	scenes = append(scenes, sceneBlocks{scene{"shell16b2-subm3", ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))}, []int{5, 40, sms}})
	rext := grid.Extent{Batch: 1, X: 24, Y: 20, Z: 18}
	scenes = append(scenes, sceneBlocks{scene{"random-strided-k3s2", ok(kmap.NewStrided(synth.RandomScene(rng, rext, 0.3), rext, grid.Cube(3, 2, 1, 1), nil))}, []int{3, sms}})
	tiny := ok(kmap.NewSubmanifold(synth.RandomScene(rng, grid.Extent{Batch: 1, X: 4, Y: 4, Z: 3}, 0.6), grid.Extent{Batch: 1, X: 4, Y: 4, Z: 3}, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	scenes = append(scenes, sceneBlocks{scene{"tiny-subm3", tiny}, []int{sms}})

	// The tiles with a stream-K twin in some arithmetic (HasStreamK:
	// alone on the SM in that arithmetic; the tf32 tiles are tf32 only).
	var tiles []kernels.Tile
	for _, tile := range kernels.HopperTiles {
		if envSelected("FLEXGEMM_TEST_TILES", tile.Name()) && slices.ContainsFunc([]kernels.Math{kernels.F16, kernels.BF16, kernels.TF32}, tile.HasStreamK) {
			tiles = append(tiles, tile)
		}
	}
	if len(tiles) == 0 && os.Getenv("FLEXGEMM_TEST_TILES") != "" {
		t.Skip("FLEXGEMM_TEST_TILES names no tile with stream-K twins")
	}
	require.NotEmpty(t, tiles)
	setBlocks := func(perSM, blocks int) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.streamKTilesPerSM, gpu.d.streamKBlocks = perSM, blocks
			return nil
		}))
	}
	defer setBlocks(streamKTilesPerSM, 0)
	const ci, co = 72, 136 // two K stages per tap forward; dgrad reads 136 columns
	for _, sc := range scenes {
		ref := cpuReference(t, rng, sc.m, ci, co)
		for _, mth := range []kernels.Math{kernels.F16, kernels.BF16, kernels.TF32} {
			gpu.SetTF32(mth == kernels.TF32)
			dt := dtypeOf(mth)
			x, w, b, dy := ref.operands(t, sc.m, dt)
			for _, tile := range tiles {
				if !tile.HasStreamK(mth) {
					continue
				}
				for _, alg := range []sparse.Algorithm{sparse.MaskedImplicitSplitK, sparse.ImplicitSplitK} {
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}, Tile: tile.Name()}
					run := func(name string) [2][]float32 {
						return forwardAndInputGrad(t, sc.m, x, w, b, dy, o, tile.HasTransposed(mth), name)
					}
					setBlocks(0, 0)
					plain := run("tile per block")
					for _, blocks := range sc.blocks {
						name := fmt.Sprintf("%s/%v/%v/%s/blocks=%d", sc.name, mth, alg, tile.Name(), blocks)
						setBlocks(8, blocks) // the shell's 155–465 tiles are in range at 8 per SM
						if blocks == 0 {
							tilesN := ceilDiv(co, int64(tile.BN))
							fwdTiles := ceilDiv(int64(sc.m.NOut), int64(tile.BM)) * tilesN
							require.NoError(t, gpu.d.do(func() error {
								require.Equal(t, int64(sms)/tilesN*tilesN, int64(gpu.d.streamK(tile, mth, fwdTiles, tilesN, 0)), "%s: the engine's own blocks run stream-K", name)
								return nil
							}))
						}
						got, again := run(name), run(name)
						for d, want := range [][]float64{ref.y, ref.dx} {
							if got[d] == nil {
								continue
							}
							e := relL2(got[d], want)
							require.LessOrEqual(t, e, bound(mth), "%s direction %d: error %g against float64", name, d, e)
							require.LessOrEqual(t, relL2(got[d], f64(plain[d])), bound(mth), "%s direction %d: against a tile per block", name, d)
							requireSameBits(t, got[d], again[d], fmt.Sprintf("%s: direction %d: run again", name, d))
						}
					}
				}
			}
			gpu.Free(x, w, b, dy)
		}
		gpu.SetTF32(false)
		gpu.ReleaseMap(sc.m)
	}
}

// skipWithoutHopper skips t on a device that did not load the Hopper
// (sm_90a) kernels.
func skipWithoutHopper(t *testing.T) {
	t.Helper()
	if !gpu.d.hopperTiles(kernels.F16) {
		t.Skip("no Hopper tiles on this device")
	}
}

// deviceCounter returns a reader of the Device's counter field (a test
// instrument such as halfSkipLaunches), read on the device's worker.
func deviceCounter(t *testing.T, field func(*Device) int) func() int {
	return func() (n int) {
		require.NoError(t, gpu.d.do(func() error { n = field(gpu.d); return nil }))
		return n
	}
}

// deviceSwitch returns a setter of the Device's switch *field (set on the
// device's worker); the switch gets its value back when the test ends.
func deviceSwitch(t *testing.T, field func(*Device) *bool) func(on bool) {
	set := func(on bool) {
		require.NoError(t, gpu.d.do(func() error { *field(gpu.d) = on; return nil }))
	}
	var was bool
	require.NoError(t, gpu.d.do(func() error { was = *field(gpu.d); return nil }))
	t.Cleanup(func() { set(was) })
	return set
}

// withoutPerTapGathers makes the masked gathers run as such, not per tap
// (pertap.go), until the test ends.
func withoutPerTapGathers(t *testing.T) {
	var was int64
	require.NoError(t, gpu.d.do(func() error { was, gpu.d.perTapMaxBytes = gpu.d.perTapMaxBytes, 0; return nil }))
	t.Cleanup(func() { gpu.d.do(func() error { gpu.d.perTapMaxBytes = was; return nil }) })
}

// TestFusedSplitReduce checks the split-K gathers of the warp-specialised
// tiles that sum their partials in the kernel (fg::split_reduce): forward
// (with bias) and input gradient against the float64 reference, the same
// bits as the reduction kernel's (the same sums in the same order), the
// launch taking that path only where all its blocks are resident, and the
// counters left zero for the next launch.
func TestFusedSplitReduce(t *testing.T) {
	skipWithoutHopper(t)
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(31, 1))
	sms := int64(gpu.d.info.SMs)
	var scenes []scene
	scenes = append(scenes, scene{"shell8-subm3", shell8Map(t)})
	rext := grid.Extent{Batch: 2, X: 12, Y: 10, Z: 9}
	scenes = append(scenes, scene{"random-strided-k3s2", ok(kmap.NewStrided(synth.RandomScene(rng, rext, 0.4), rext, grid.Cube(3, 2, 1, 1), nil))})
	tiny := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 3}
	scenes = append(scenes, scene{"tiny-subm3", ok(kmap.NewSubmanifold(synth.RandomScene(rng, tiny, 0.6), tiny, [3]int{3, 3, 3}, [3]int{1, 1, 1}))})

	var tiles []kernels.Tile
	for _, tile := range kernels.HopperTiles {
		if tile.Producers > 0 && envSelected("FLEXGEMM_TEST_TILES", tile.Name()) {
			tiles = append(tiles, tile)
		}
	}
	require.NotEmpty(t, tiles)
	was := fusedSplitReduce.Load()
	defer fusedSplitReduce.Store(was)
	withoutPerTapGathers(t)
	counters := func() []uint32 {
		c := make([]uint32, 2*splitCounterTiles)
		require.NoError(t, gpu.d.do(func() error {
			return gpu.d.copyToHost(unsafe.Pointer(&c[0]), gpu.d.splitCtr, int64(4*len(c)))
		}))
		return c
	}
	launches := deviceCounter(t, func(d *Device) int { return d.fusedSplitLaunches })
	for _, ch := range [][2]int{{72, 136}, {256, 256}} {
		ci, co := ch[0], ch[1]
		for _, sc := range scenes {
			ref := cpuReference(t, rng, sc.m, ci, co)
			for _, mth := range []kernels.Math{kernels.F16, kernels.BF16, kernels.TF32} {
				gpu.SetTF32(mth == kernels.TF32)
				dt := dtypeOf(mth)
				x, w, b, dy := ref.operands(t, sc.m, dt)
				for _, tile := range tiles {
					if !tile.Supports(mth) {
						continue
					}
					tilesN := ceilDiv(int64(co), int64(tile.BN))
					fwdTiles := ceilDiv(int64(sc.m.NOut), int64(tile.BM)) * tilesN
					resident := sms * int64(tile.BlocksPerSM(kernels.Gather, mth))
					for _, splits := range []int{2, 3, 16, int(resident/fwdTiles) + 1} {
						for _, alg := range []sparse.Algorithm{sparse.MaskedImplicitSplitK, sparse.ImplicitSplitK} {
							name := fmt.Sprintf("ci%d-co%d/%s/%v/%v/%s/splits=%d", ci, co, sc.name, mth, alg, tile.Name(), splits)
							o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg, SplitK: splits}, Tile: tile.Name()}
							fusedSplitReduce.Store(false)
							before := launches()
							want := forwardAndInputGrad(t, sc.m, x, w, b, dy, o, tile.HasTransposed(mth), name)
							require.Equal(t, before, launches(), "%s: switched off, the reduction kernel sums", name)
							fusedSplitReduce.Store(true)
							got := forwardAndInputGrad(t, sc.m, x, w, b, dy, o, tile.HasTransposed(mth), name)
							// A direction sums in the kernel where all its blocks are resident.
							wantFused := 0
							if int64(splits)*fwdTiles <= resident {
								wantFused++
							}
							dgradTiles := ceilDiv(int64(sc.m.NIn), int64(tile.BM)) * ceilDiv(int64(ci), int64(tile.BN))
							if tile.HasTransposed(mth) && int64(splits)*dgradTiles <= resident {
								wantFused++
							}
							require.Equal(t, wantFused, launches()-before, "%s: launches that summed in the kernel", name)
							for d, ref := range [][]float64{ref.y, ref.dx} {
								if got[d] == nil {
									continue
								}
								e := relL2(got[d], ref)
								require.LessOrEqual(t, e, bound(mth), "%s direction %d: error %g against float64", name, d, e)
								requireSameBits(t, want[d], got[d], fmt.Sprintf("%s: direction %d: in the kernel against the reduction kernel", name, d))
							}
							for i, c := range counters() {
								require.Zero(t, c, "%s: split counter %d left at %d", name, i, c)
							}
						}
					}
				}
				gpu.Free(x, w, b, dy)
			}
			gpu.SetTF32(false)
			gpu.ReleaseMap(sc.m)
		}
	}
}

// TestFusedSplitReduceBesideSide checks that an input gradient queued
// beside a weight gradient on the side stream keeps the reduction kernel
// (Device.fusesSplitReduce: the side stream's blocks would hold SMs the
// waiting split blocks need), and that the same input gradient alone sums
// in the kernel, with the same bits.
func TestFusedSplitReduceBesideSide(t *testing.T) {
	skipWithoutHopper(t)
	m := shell8Map(t)
	var tile kernels.Tile
	for _, tl := range kernels.HopperTiles {
		if tl.Producers > 0 && tl.HasTransposed(kernels.F16) && tl.BlocksPerSM(kernels.Gather, kernels.F16) == 1 {
			tile = tl
			break
		}
	}
	require.Positive(t, tile.Producers, "a warp-specialised 16-bit tile")
	was := fusedSplitReduce.Load()
	defer fusedSplitReduce.Store(was)
	fusedSplitReduce.Store(true)
	rng := rand.New(rand.NewPCG(41, 1))
	const c = 128
	V := m.V()
	x := dev(t, m.NIn, c, synth.Uniform[float32](rng, m.NIn*c), sparse.Float16)
	w := dev(t, c, V*c, synth.Uniform[float32](rng, c*V*c), sparse.Float16)
	dy := dev(t, m.NOut, c, synth.Uniform[float32](rng, m.NOut*c), sparse.Float16)
	defer gpu.Free(x, w, dy)
	o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK, SplitK: 2}, Tile: tile.Name()}
	state := func() (launches int, sideOn bool) {
		require.NoError(t, gpu.d.do(func() error {
			launches, sideOn = gpu.d.fusedSplitLaunches, gpu.d.sideOn() && int64(m.NOut) <= gpu.d.side.maxRows
			return nil
		}))
		return launches, sideOn
	}
	before, sideOn := state()
	if !sideOn {
		t.Skip("the side stream is off")
	}
	dw, err := gpu.WeightGrad(m, x, dy, o) // queued on the side stream
	require.NoError(t, err)
	dxBeside, err := gpu.InputGrad(m, dy, w, o)
	require.NoError(t, err)
	after, _ := state()
	require.Equal(t, before, after, "beside the side stream's weight gradient the reduction kernel sums")
	require.Len(t, host(t, dw), c*V*c) // the download joins the side stream
	gpu.Free(dw)
	dxAlone, err := gpu.InputGrad(m, dy, w, o)
	require.NoError(t, err)
	alone, _ := state()
	require.Equal(t, after+1, alone, "alone, the input gradient sums in the kernel")
	got, want := host(t, dxAlone), host(t, dxBeside)
	gpu.Free(dxAlone, dxBeside)
	requireSameBits(t, want, got, "input gradient in the kernel against the reduction kernel")
}
