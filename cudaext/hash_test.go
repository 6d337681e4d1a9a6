//go:build cudaext

package cudaext

// GPU tests of the spatial kernels: hash table, scans, radix sort, unique.
// Helpers shared by the spatial tests (kmapgpu_test.go, serialize_test.go,
// voxelize_test.go, pool_test.go, gridsample_test.go) are prefixed gx.
// They need a GPU (skipped otherwise):
//
//	go test -c -tags cudaext -o cudaext.test ./cudaext
//	./cudaext.test -test.run 'GPU' -test.v
//	compute-sanitizer ./cudaext.test -test.run TestGPUSanitizerSweep

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/hash"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/serialize"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// gxEngine returns the engine of GPU 0, skipping the test without one.
func gxEngine(t testing.TB) *Engine {
	t.Helper()
	e, err := Open(0)
	if errors.Is(err, ErrNoDevice) {
		t.Skip("no GPU:", err)
	}
	require.NoError(t, err)
	return e
}

// gxCoords uploads flat [N, 4] coordinates.
func gxCoords(t testing.TB, e *Engine, c []int32) sparse.Matrix {
	t.Helper()
	m, err := e.ToDevice(sparse.Matrix{Rows: len(c) / 4, Cols: 4, Data: c})
	require.NoError(t, err)
	return m
}

// gxI32 downloads a device Int32 matrix.
func gxI32(t testing.TB, e *Engine, m sparse.Matrix) []int32 {
	t.Helper()
	h, err := e.ToHost(m)
	require.NoError(t, err)
	return h.I32()
}

// gxF32 downloads a device float matrix as float32.
func gxF32(t testing.TB, e *Engine, m sparse.Matrix) []float32 {
	t.Helper()
	h, err := e.ToHost(m)
	require.NoError(t, err)
	return h.F32()
}

// gxRelL2 returns ‖got − want‖ / max(‖want‖, tiny); NaN anywhere gives NaN.
func gxRelL2(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// gxDownload copies n elements of device memory (test helper).
func gxDownload[T any](t testing.TB, e *Engine, p devPtr, n int) []T {
	t.Helper()
	var out []T
	require.NoError(t, e.d.do(func() (err error) { out, err = download[T](e.d, p, n); return err }))
	return out
}

// gxShuffled returns the rows of c in random order.
func gxShuffled(rng *rand.Rand, c []int32) []int32 {
	n := len(c) / 4
	out := make([]int32, len(c))
	for j, i := range rng.Perm(n) {
		copy(out[4*j:4*j+4], c[4*i:4*i+4])
	}
	return out
}

type gxScene struct {
	name   string
	coords []int32
	ext    grid.Extent
}

// gxScenes returns the test scenes: empty, tiny, random (sorted and
// shuffled, several batches), sphere shells.
func gxScenes(rng *rand.Rand) []gxScene {
	var s []gxScene
	add := func(name string, c []int32, ext grid.Extent) { s = append(s, gxScene{name, c, ext}) }
	add("empty", nil, grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4})
	add("single", []int32{0, 1, 2, 3}, grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4})
	e1 := grid.Extent{Batch: 2, X: 9, Y: 7, Z: 11}
	add("random-dense", synth.RandomScene(rng, e1, 0.4), e1)
	add("random-dense-shuffled", gxShuffled(rng, synth.RandomScene(rng, e1, 0.4)), e1)
	e2 := grid.Extent{Batch: 3, X: 40, Y: 33, Z: 37}
	add("random-sparse-shuffled", gxShuffled(rng, synth.RandomScene(rng, e2, 0.05)), e2)
	c, ext := synth.SphereShell(32, 2)
	add("shell32x2", c, ext)
	c, ext = synth.SphereShell(64, 1)
	add("shell64-shuffled", gxShuffled(rng, c), ext)
	return s
}

func TestGPUScan(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 7, 2047, 2048, 2049, 100_003, 5_000_000}
	if testing.Short() {
		sizes = sizes[:7]
	}
	for _, n := range sizes {
		in := make([]int32, n)
		for i := range in {
			in[i] = int32(rng.IntN(100)) - 10
		}
		want32 := make([]int32, n+1)
		want64 := make([]int64, n+1)
		for i, v := range in {
			want32[i+1] = want32[i] + v
			want64[i+1] = want64[i] + int64(v)
		}
		in64 := make([]int64, n)
		for i, v := range in {
			in64[i] = int64(v) << 20
		}
		var g32 []int32
		var g64, gw []int64
		require.NoError(t, e.d.do(func() error {
			d := e.d
			a, err := d.allocTemp(int64(n+1) * 8)
			if err != nil {
				return err
			}
			defer d.freeTemp(a)
			b, err := d.allocTemp(int64(n+1) * 8)
			if err != nil {
				return err
			}
			defer d.freeTemp(b)
			// int32 → int32, in place.
			if err := uploadTo(d, a.ptr, in); err != nil {
				return err
			}
			if err := d.scan(scanI32, a.ptr, a.ptr, int64(n), a.ptr+devPtr(4*n)); err != nil {
				return err
			}
			if g32, err = download[int32](d, a.ptr, n+1); err != nil {
				return err
			}
			// int32 → int64.
			if err := uploadTo(d, a.ptr, in); err != nil {
				return err
			}
			if err := d.scan(scanI32I64, a.ptr, b.ptr, int64(n), b.ptr+devPtr(8*n)); err != nil {
				return err
			}
			if g64, err = download[int64](d, b.ptr, n+1); err != nil {
				return err
			}
			// int64 → int64, in place.
			if err := uploadTo(d, b.ptr, in64); err != nil {
				return err
			}
			if err := d.scan(scanI64, b.ptr, b.ptr, int64(n), b.ptr+devPtr(8*n)); err != nil {
				return err
			}
			gw, err = download[int64](d, b.ptr, n+1)
			return err
		}))
		require.Equal(t, want32, g32, "n=%d", n)
		require.Equal(t, want64, g64, "n=%d", n)
		for i := range want64 {
			require.Equal(t, want64[i]<<20, gw[i], "n=%d i=%d", n, i)
		}
	}
}

// TestSortPlan checks the radix passes: digits of at most sortMaxDigit
// bits, spread evenly.
func TestSortPlan(t *testing.T) {
	for _, tc := range []struct{ nbits, passes, width int }{
		{0, 0, 0}, {1, 1, 1}, {8, 1, 8}, {9, 1, 9}, {10, 2, 5}, {17, 2, 9},
		{27, 3, 9}, {28, 4, 7}, {32, 4, 8}, {41, 5, 9}, {64, 8, 8},
	} {
		p, w := sortPlan(tc.nbits)
		require.Equal(t, [2]int{tc.passes, tc.width}, [2]int{p, w}, "%d bits", tc.nbits)
		require.LessOrEqual(t, w, sortMaxDigit)
	}
}

func TestGPURadixSort(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(3, 4))
	// Up to runSortMax (65536) 32-bit keys sort in runs of 1024
	// (sort_runs) merged in one launch (sort_merge), more (and 64-bit
	// keys) in radix passes: the one-wave sort where its tiles are all
	// resident, up to onesweepMaxTiles (300,001 keys), the onesweep sort
	// there with noWaveSort, the classic passes (noOnesweep) or CUB's
	// onesweep agents (cubSort: above onesweepMaxTiles, 1,000,003 keys,
	// and every size in a quarter of the cases, cubSortAll), all checked;
	// half the cases up to 65536 keys take the radix passes too
	// (runSortMax 0, EnvRunSortMaxKeys), and the widths 9, 27 and 41
	// sort keys without values.
	sizes := []int{0, 1, 2, 64, 1023, 1025, 4097, 15_192, 64_160, 65_536, 65_537, 300_001, 1_000_003}
	if testing.Short() {
		sizes = sizes[:11]
	}
	defer func() {
		require.NoError(t, e.d.do(func() error {
			e.d.noOnesweep, e.d.noWaveSort, e.d.runSortMax, e.d.cubSortFrom = false, false, runSortLimit, cubSortAbove
			return nil
		}))
	}()
	// check sorts n random keys of nbits bits by the path of mode
	// (0: classic, 1: onesweep, 2: one-wave where it fits, 3: CUB's
	// agents) and compares keys and values with a stable sort here.
	check := func(n, nbits, mode int) {
		classic, noWave := mode == 0, mode == 1
		cub := cubSortAbove
		if mode == 3 {
			cub = cubSortAll
		}
		runMax := int64(runSortLimit)
		if (n+nbits)%2 == 1 {
			runMax = 0
		}
		require.NoError(t, e.d.do(func() error {
			e.d.noOnesweep, e.d.noWaveSort, e.d.runSortMax, e.d.cubSortFrom = classic, noWave, runMax, cub
			return nil
		}))
		// Values are the original positions (iota) or carried along.
		iota := nbits%2 == 0
		keysOnly := nbits == 9 || nbits == 27 || nbits == 41 // 32- and 64-bit keys without values
		wide := nbits > 32
		keys := make([]uint64, n)
		for i := range keys {
			k := rng.Uint64()
			if nbits < 64 {
				k &= 1<<nbits - 1
			}
			if nbits == 27 && n%2 == 1 {
				// Only the low digit varies: every tile of the later
				// passes holds one digit (CUB's short-circuit copy).
				k &= 1<<9 - 1
			}
			if rng.IntN(4) == 0 && i > 0 {
				k = keys[rng.IntN(i)] // duplicates test stability
			}
			keys[i] = k
		}
		perm := make([]int32, n)
		for i := range perm {
			perm[i] = int32(i)
		}
		sort.SliceStable(perm, func(a, b int) bool { return keys[perm[a]] < keys[perm[b]] })
		var gotK []uint64
		var gotV []int32
		require.NoError(t, e.d.do(func() error {
			d := e.d
			kb, err := d.allocTemp(int64(max(n, 1)) * 8)
			if err != nil {
				return err
			}
			defer d.freeTemp(kb)
			vb, err := d.allocTemp(int64(max(n, 1)) * 4)
			if err != nil {
				return err
			}
			defer d.freeTemp(vb)
			if !iota && n > 0 {
				idx := make([]int32, n)
				for i := range idx {
					idx[i] = int32(i)
				}
				if err := uploadTo(d, vb.ptr, idx); err != nil {
					return err
				}
			}
			if wide {
				if err := uploadTo(d, kb.ptr, keys); err != nil {
					return err
				}
			} else {
				k32 := make([]uint32, n)
				for i, k := range keys {
					k32[i] = uint32(k)
				}
				if err := uploadTo(d, kb.ptr, k32); err != nil {
					return err
				}
			}
			vp := vb.ptr
			if keysOnly {
				vp = 0
			}
			if err := d.radixSort(kb.ptr, vp, int64(n), wide, nbits, iota); err != nil {
				return err
			}
			if gotV, err = download[int32](d, vb.ptr, n); err != nil {
				return err
			}
			if wide {
				gotK, err = download[uint64](d, kb.ptr, n)
				return err
			}
			k32, err := download[uint32](d, kb.ptr, n)
			gotK = make([]uint64, n)
			for i, k := range k32 {
				gotK[i] = uint64(k)
			}
			return err
		}))
		if nbits == 0 {
			// Nothing to sort by: the identity.
			for i := range perm {
				perm[i] = int32(i)
			}
		}
		want := make([]uint64, n)
		for i, p := range perm {
			want[i] = keys[p]
		}
		require.Equal(t, want, gotK, "n=%d bits=%d mode=%d", n, nbits, mode)
		if keysOnly {
			// The values were left alone.
			for i := range perm {
				perm[i] = int32(i)
			}
		}
		require.Equal(t, perm, gotV, "n=%d bits=%d mode=%d keysOnly=%v: the sort must be stable", n, nbits, mode, keysOnly)
	}
	for _, n := range sizes {
		for _, nbits := range []int{0, 1, 5, 8, 9, 17, 27, 32, 41, 64} {
			check(n, nbits, (n+nbits)%4)
		}
	}
	// CUB's agents on every kind of sort they serve, above the run sort:
	// 32-bit keys alone (27 bits), 64-bit keys alone (41), 64-bit keys
	// with their positions (64).
	for _, n := range sizes[len(sizes)-3:] {
		for _, nbits := range []int{27, 41, 64} {
			check(n, nbits, 3)
		}
	}
}

// TestGPUWaveTiles checks the one-wave sort's rule: at least a block per
// SM on the main stream (so that radixSort's bound of onesweepMaxTiles,
// not residency, decides on the H200: the RES 256 Gray ranks take it),
// none while the side stream is in use.
func TestGPUWaveTiles(t *testing.T) {
	e := gxEngine(t)
	require.NoError(t, e.d.do(func() error {
		d := e.d
		for _, suffix := range []string{"u32", "u64"} {
			most, err := d.waveTiles(suffix)
			if err != nil {
				return err
			}
			require.GreaterOrEqual(t, most, int64(d.info.SMs), suffix)
			require.Zero(t, most%int64(d.info.SMs), suffix)
			d.side.in = true
			most, err = d.waveTiles(suffix)
			d.side.in = false
			if err != nil {
				return err
			}
			require.Zero(t, most, "%s on the side stream", suffix)
		}
		return nil
	}))
}

func TestGPUUnique(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 5, 3000, 100_000} {
		for _, wide := range []bool{false, true} {
			keys := make([]uint64, n)
			for i := range keys {
				keys[i] = uint64(rng.IntN(max(n/3, 1)))
				if wide {
					keys[i] += 1 << 40
				}
			}
			sentinel := uint64(math.MaxUint32)
			if wide {
				sentinel = 1 << 50
			}
			for i := range keys {
				if rng.IntN(10) == 0 {
					keys[i] = sentinel
				}
			}
			slices.Sort(keys)
			want := slices.Compact(slices.Clone(keys))
			if len(want) > 0 && want[len(want)-1] == sentinel {
				want = want[:len(want)-1]
			}
			var got []uint64
			require.NoError(t, e.d.do(func() error {
				d := e.d
				kb, err := d.allocTemp(int64(max(n, 1)) * 8)
				if err != nil {
					return err
				}
				defer d.freeTemp(kb)
				if wide {
					err = uploadTo(d, kb.ptr, keys)
				} else {
					k32 := make([]uint32, n)
					for i, k := range keys {
						k32[i] = uint32(k)
					}
					err = uploadTo(d, kb.ptr, k32)
				}
				if err != nil {
					return err
				}
				out, m, err := d.unique(kb.ptr, int64(n), wide, sentinel)
				if err != nil {
					return err
				}
				defer d.freeTemp(out)
				if wide {
					got, err = download[uint64](d, out.ptr, int(m))
					return err
				}
				k32, err := download[uint32](d, out.ptr, int(m))
				got = make([]uint64, len(k32))
				for i, k := range k32 {
					got[i] = uint64(k)
				}
				return err
			}))
			require.Equal(t, len(want), len(got), "n=%d wide=%v", n, wide)
			if len(want) > 0 {
				require.Equal(t, want, got)
			}
		}
	}
}

// TestGPUCoordIndex builds the index of every scene (narrow keys) and of a
// wide-key extent and looks up every row, absent sites and out-of-grid
// queries, against the host table.
func TestGPUCoordIndex(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(7, 8))
	scenes := gxScenes(rng)
	wideExt := grid.Extent{Batch: 3, X: 3000, Y: 2000, Z: 1500} // > 2^32 sites: 64-bit keys
	wc := make([]int32, 0, 4*5000)
	seen := map[[4]int32]bool{}
	for len(wc) < 4*5000 {
		p := [4]int32{int32(rng.IntN(3)), int32(rng.IntN(3000)), int32(rng.IntN(2000)), int32(rng.IntN(1500))}
		if !seen[p] {
			seen[p] = true
			wc = append(wc, p[:]...)
		}
	}
	scenes = append(scenes, gxScene{"wide-keys", wc, wideExt})
	for _, sc := range scenes {
		t.Run(sc.name, func(t *testing.T) {
			require.Equal(t, sc.name == "wide-keys", sc.ext.KeyBits() == 64)
			ix, err := e.NewCoordIndex(gxCoords(t, e, sc.coords), sc.ext)
			require.NoError(t, err)
			defer ix.Free()
			n := len(sc.coords) / 4
			require.Equal(t, n, ix.Len())
			require.GreaterOrEqual(t, ix.Slots(), 2*n)
			ref, err := hash.FromCoords(sc.coords, sc.ext)
			require.NoError(t, err)
			// Queries: every row, random sites, out-of-grid sites.
			q := slices.Clone(sc.coords)
			for range 2000 {
				q = append(q, int32(rng.IntN(sc.ext.Batch+1)), int32(rng.IntN(sc.ext.X+2)-1), int32(rng.IntN(sc.ext.Y+2)-1), int32(rng.IntN(sc.ext.Z+2)-1))
			}
			got, err := ix.Lookup(gxCoords(t, e, q))
			require.NoError(t, err)
			g := gxI32(t, e, got)
			require.Len(t, g, len(q)/4)
			for i := range len(q) / 4 {
				c := q[4*i : 4*i+4]
				want := int32(-1)
				if sc.ext.Contains(int(c[0]), int(c[1]), int(c[2]), int(c[3])) {
					want = ref.Get(sc.ext.Key(int(c[0]), int(c[1]), int(c[2]), int(c[3])), -1)
				}
				require.Equal(t, want, g[i], "query %d %v", i, c)
				if i < n {
					require.Equal(t, int32(i), g[i])
				}
			}
			// Host queries work too.
			got2, err := ix.Lookup(sparse.Matrix{Rows: len(q) / 4, Cols: 4, Data: q})
			require.NoError(t, err)
			require.Equal(t, g, gxI32(t, e, got2))
		})
	}
}

// TestGPUCoordIndexErrors checks that out-of-grid and duplicate rows are
// reported with the rows the CPU builders name, and that a full fixed
// table is an error, not a hang.
func TestGPUCoordIndexErrors(t *testing.T) {
	e := gxEngine(t)
	ext := grid.Extent{Batch: 2, X: 5, Y: 5, Z: 5}
	cases := []struct {
		name   string
		coords []int32
		kinds  []error
		want   string
	}{
		{"outside", []int32{0, 1, 1, 1, 1, 4, 4, 4, 0, 5, 0, 0, 2, 0, 0, 0}, []error{sparse.ErrOutOfRange, kmap.ErrOutOfRange}, "row 2 (0, 5, 0, 0) is outside"},
		{"negative", []int32{0, 1, 1, 1, -1, 0, 0, 0}, []error{sparse.ErrOutOfRange}, "row 1 (-1, 0, 0, 0)"},
		{"duplicate", []int32{0, 1, 1, 1, 1, 2, 2, 2, 0, 3, 3, 3, 1, 2, 2, 2, 0, 1, 1, 1}, []error{sparse.ErrDuplicate, kmap.ErrDuplicate}, "rows 1 and 3 are both (1, 2, 2, 2)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.NewCoordIndex(gxCoords(t, e, c.coords), ext)
			require.Error(t, err)
			for _, k := range c.kinds {
				require.ErrorIs(t, err, k)
			}
			require.ErrorContains(t, err, c.want)
			// The CPU builder names the same rows.
			_, cerr := kmap.NewSubmanifold(c.coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
			require.Error(t, cerr)
			require.ErrorContains(t, cerr, c.want)
		})
	}
	t.Run("full", func(t *testing.T) {
		coords := synth.RandomScene(rand.New(rand.NewPCG(9, 9)), ext, 0.5)
		require.Greater(t, len(coords)/4, 8)
		_, err := e.newCoordIndex(gxCoords(t, e, coords), ext, 3) // 8 slots
		require.ErrorIs(t, err, hash.ErrFull)
		require.ErrorContains(t, err, "8 slots")
		// Exactly full still works: 8 keys in 8 slots.
		ix, err := e.newCoordIndex(gxCoords(t, e, coords[:32]), ext, 3)
		require.NoError(t, err)
		got, err := ix.Lookup(gxCoords(t, e, coords[:32]))
		require.NoError(t, err)
		require.Equal(t, []int32{0, 1, 2, 3, 4, 5, 6, 7}, gxI32(t, e, got))
		ix.Free()
		_, err = ix.Lookup(gxCoords(t, e, coords[:4]))
		require.ErrorIs(t, err, ErrFreed)
	})
	t.Run("shape", func(t *testing.T) {
		_, err := e.NewCoordIndex(sparse.Matrix{Rows: 1, Cols: 3, Data: []int32{1, 2, 3}}, ext)
		require.ErrorIs(t, err, sparse.ErrShape)
		_, err = e.NewCoordIndex(sparse.Matrix{Rows: 0, Cols: 4, Data: []int32{}}, grid.Extent{})
		require.ErrorIs(t, err, grid.ErrBadExtent)
	})
}

// TestGPUSanitizerSweep runs every spatial kernel once on tiny inputs and
// checks nothing but success: a quick target for
//
//	compute-sanitizer --tool memcheck ./cudaext.test -test.run TestGPUSanitizerSweep
//	compute-sanitizer --tool racecheck ./cudaext.test -test.run TestGPUSanitizerSweep
func TestGPUSanitizerSweep(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(61, 62))
	ext := grid.Extent{Batch: 2, X: 7, Y: 6, Z: 5}
	coords := gxShuffled(rng, synth.RandomScene(rng, ext, 0.3))
	n := len(coords) / 4
	dc := gxCoords(t, e, coords)
	ix, err := e.NewCoordIndex(dc, ext)
	require.NoError(t, err)
	_, err = ix.Lookup(dc)
	require.NoError(t, err)
	ix.Free()
	sm, err := e.SubmanifoldMap(dc, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	require.NoError(t, e.DeriveTables(sm, TablesAll, tileHeights()...))
	big, err := e.SubmanifoldMap(dc, ext, [3]int{5, 5, 5}, [3]int{1, 1, 1})
	require.NoError(t, err)
	require.NoError(t, e.DeriveTables(big, TablesAll, tileHeights()...))
	st, err := e.StridedMap(dc, ext, grid.Cube(3, 2, 1, 1), sparse.Matrix{})
	require.NoError(t, err)
	require.NoError(t, e.DeriveTables(st, TablesAll, tileHeights()...))
	inv, err := e.InverseMap(st)
	require.NoError(t, err)
	require.NoError(t, e.DeriveTables(inv, TablesAll, tileHeights()...))
	tr, err := e.TransposedMap(dc, ext, grid.Cube(2, 2, 0, 1))
	require.NoError(t, err)
	require.NoError(t, e.DeriveTables(tr, TablesAll, tileHeights()...))
	for _, mode := range []serialize.Mode{serialize.ZOrder, serialize.Hilbert} {
		codes, err := e.EncodeCoords(dc, ext, mode)
		require.NoError(t, err)
		_, err = e.DecodeCoords(codes, ext, mode)
		require.NoError(t, err)
		_, perm, err := e.SortCoords(dc, ext, mode)
		require.NoError(t, err)
		x, err := e.ToDevice(sparse.Matrix{Rows: n, Cols: 3, Data: synth.Uniform[float32](rng, 3*n)})
		require.NoError(t, err)
		_, err = e.GatherRows(x, perm)
		require.NoError(t, err)
	}
	pts := synth.Uniform[float32](rng, 3*300)
	for i := range pts {
		pts[i] = pts[i]*4 + 3
	}
	dpts, err := e.ToDevice(sparse.Matrix{Rows: 300, Cols: 3, Data: pts})
	require.NoError(t, err)
	feats, err := e.ToDevice(sparse.Matrix{Rows: 300, Cols: 2, Data: synth.Uniform[float32](rng, 600)})
	require.NoError(t, err)
	vox, err := e.Voxelize(dpts, feats, sparse.Matrix{}, sparse.VoxelizeOptions{VoxelSize: [3]float64{0.5, 0.5, 0.5}, DropOutside: true})
	require.NoError(t, err)
	vox.Free()
	x, err := e.ToDevice(sparse.Matrix{Rows: st.NIn, Cols: 3, Data: synth.Uniform[float32](rng, 3*st.NIn)})
	require.NoError(t, err)
	dy, err := e.ToDevice(sparse.Matrix{Rows: st.NOut, Cols: 3, Data: synth.Uniform[float32](rng, 3*st.NOut)})
	require.NoError(t, err)
	for _, mode := range []sparse.PoolMode{sparse.MaxPool, sparse.AvgPool} {
		_, arg, err := e.PoolForward(st, x, mode)
		require.NoError(t, err)
		_, err = e.PoolGrad(st, dy, arg, mode)
		require.NoError(t, err)
	}
	q := gxQueries(rng, ext, 40)
	dq, err := e.ToDevice(sparse.Matrix{Rows: len(q) / 3, Cols: 3, Data: q})
	require.NoError(t, err)
	f, err := e.ToDevice(sparse.Matrix{Rows: n, Cols: 3, Data: synth.Uniform[float32](rng, 3*n)})
	require.NoError(t, err)
	g, err := e.ToDevice(sparse.Matrix{Rows: len(q) / 3, Cols: 3, Data: synth.Uniform[float32](rng, len(q))})
	require.NoError(t, err)
	for _, mode := range []sparse.SampleMode{sparse.Trilinear, sparse.Nearest} {
		p, err := e.NewSamplePlan(dc, ext, dq, 40, mode)
		require.NoError(t, err)
		_, err = p.Sample(f)
		require.NoError(t, err)
		_, _, err = p.Grad(f, g)
		require.NoError(t, err)
		p.Free()
	}
	require.NoError(t, e.Synchronize())
}

// TestGPUSpatialParamsMirrorCpp checks that the Go mirrors of the kernel
// parameter structs have the C++ layouts (sizes, and the declarations
// they mirror are unchanged).
func TestGPUSpatialParamsMirrorCpp(t *testing.T) {
	require.Equal(t, uintptr(32), unsafe.Sizeof(extArg{}))
	require.Equal(t, uintptr(24), unsafe.Sizeof(tableArg{}))
	require.Equal(t, uintptr(56), unsafe.Sizeof(convArg{}))
	require.Equal(t, uintptr(88), unsafe.Sizeof(voxOpts{}))
	for file, decls := range map[string][]string{
		"kernels/hashtable.cuh": {
			"struct Ext {\n  i64 B, X, Y, Z;",
			"struct Table {\n  u64* slots;  // narrow: [1 << lg]; wide: [2 << lg]\n  int lg;      // log2 of the slot count, ≥ kGroupBits + 1\n  int wide;    // 0: narrow layout, 1: wide layout\n  int limit;   // probes an insert may make before giving up\n  int probe;",
			"kFlags = 0,", "kMaxProbe = 1,", "kBadRow = 2,", "kDupLo = 4,", "kDupHi = 5,", "kAux = 6,", "kStatusWords = 8",
			"kFlagFull = 1, kFlagDup = 2, kFlagRange = 4, kFlagAux = 8",
			"constexpr int kGroupBits = 2;",
		},
		"kernels/kmap.cu":     {"struct Conv {\n  int K[3], S[3], P[3], D[3];\n  int V, pad;", "constexpr int kChunk = 256;"},
		"kernels/voxelize.cu": {"struct Opts {\n  double size[3], origin[3];\n  Ext ext;    // the grid (given), or the derived one in vox_keys\n  int given;  // 1 when ext was given by the caller\n  int drop;"},
		"kernels/sort.cu":     {"constexpr int kThreads = 256;", "constexpr int kItems = 8;"},
		"kernels/sort_cub.cuh": {"constexpr int kPassThreads = 384;", "constexpr int kHistThreads = 128;",
			"static_assert(kTileItems == (sizeof(Key) == 8 ? 384 * 10 : 384 * 21), \"the host's tile size\");"},
	} {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, d := range decls {
			require.Containsf(t, string(src), d, "%s changed a declaration mirrored in Go", file)
		}
	}
	require.Equal(t, 2048, sortTile)
	require.Equal(t, [3]int64{384, 384 * 21, 384 * 10}, [3]int64{cubPassThreads, cubPassTile(4), cubPassTile(8)})
	require.Equal(t, 128, cubHistThreads)
	require.Equal(t, 256, pairsChunk)
	require.Equal(t, 2, groupBits)
}
