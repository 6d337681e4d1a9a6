//go:build cudaext

package cudaext

// GPU tests of maps built on the device: their host tables stay there
// until host code asks (kmap.Map.Load), and a training step on them makes
// the host wait for nothing (HostWaits).

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// lzMaps are GPU-built maps of one scene with their CPU-built twins.
type lzMaps struct {
	name     string
	gpu, cpu *kmap.Map
}

// lzScene builds a submanifold, a strided (K2S2), its inverse and a
// transposed map on the GPU from device coordinates, and their CPU twins.
func lzScene(t *testing.T, res, batch int) []lzMaps {
	t.Helper()
	ok := mapOK(t)
	coords, ext := synth.SphereShell(res, batch)
	dc := gxCoords(t, gpu, coords)
	defer gpu.Free(dc)
	down := grid.Cube(2, 2, 0, 1)
	sub := gxBuild(t, gpu, func() (*kmap.Map, error) { return gpu.SubmanifoldMap(dc, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}) })
	st := gxBuild(t, gpu, func() (*kmap.Map, error) { return gpu.StridedMap(dc, ext, down, sparse.Matrix{}) })
	inv := gxBuild(t, gpu, func() (*kmap.Map, error) { return gpu.InverseMap(st) })
	tr := gxBuild(t, gpu, func() (*kmap.Map, error) { return gpu.TransposedMap(dc, ext, down) })
	cst := ok(kmap.NewStrided(coords, ext, down, nil))
	return []lzMaps{
		{"submanifold", sub, ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))},
		{"strided", st, cst},
		{"inverse", inv, ok(kmap.NewInverse(cst))},
		{"transposed", tr, ok(kmap.NewTransposed(coords, ext, down))},
	}
}

// TestGPUMapStepNoHostWaits: forward, input and weight gradients (every
// algorithm, two tiles, f32 and f16) and pooling on maps built on the GPU
// with their tables derived there make the host wait for nothing and
// download nothing; the maps stay unloaded; the results match the CPU.
func TestGPUMapStepNoHostWaits(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 72))
	tiles := []string{"m64n64k32w2x2s4", "m128n64k32w2x2s4"}
	for _, mp := range lzScene(t, 16, 2) {
		t.Run(mp.name, func(t *testing.T) {
			m := mp.gpu
			before := gpu.HostWaits()
			require.NoError(t, gpu.DeriveTables(m, TablesAll))
			require.Equal(t, HostWaits{}, gxWaitsSince(before, gpu.HostWaits()), "preparing waits for nothing")
			ref := cpuReference(t, rng, mp.cpu, 13, 32)
			for _, mth := range []kernels.Math{kernels.F32, kernels.F16} {
				dt := dtypeOf(mth)
				x, w, b, dy := ref.operands(t, m, dt)
				px := dev(t, m.NIn, ref.ci, ref.x, dt)
				type result struct {
					what string
					out  sparse.Matrix
					want []float64
				}
				var outs []result
				start := gpu.HostWaits()
				for _, alg := range sparse.Algorithms {
					if alg == sparse.Auto {
						continue // the autotuner times candidates (waits by design)
					}
					for _, tile := range tiles {
						o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}, Tile: tile}
						name := fmt.Sprintf("%v/%v/%s", mth, alg, tile)
						y, err := gpu.Forward(m, x, w, b, o)
						require.NoError(t, err, name)
						dx, err := gpu.InputGrad(m, dy, w, o)
						require.NoError(t, err, name)
						dw, err := gpu.WeightGrad(m, x, dy, o)
						require.NoError(t, err, name)
						outs = append(outs, result{name + "/fwd", y, ref.y}, result{name + "/dgrad", dx, ref.dx}, result{name + "/wgrad", dw, ref.dw})
					}
				}
				// The package API routes device data here without loading.
				y, err := sparse.Conv(m, x, w, b, sparse.ConvOptions{Algorithm: sparse.MaskedImplicit})
				require.NoError(t, err)
				outs = append(outs, result{"sparse.Conv", y, ref.y})
				py, arg, err := sparse.Pool(m, px, sparse.MaxPool)
				require.NoError(t, err)
				pg, err := sparse.PoolGrad(m, py, arg, sparse.MaxPool)
				require.NoError(t, err)
				ay, _, err := sparse.Pool(m, px, sparse.AvgPool)
				require.NoError(t, err)
				ag, err := sparse.PoolGrad(m, ay, sparse.Matrix{}, sparse.AvgPool)
				require.NoError(t, err)
				require.Equal(t, HostWaits{}, gxWaitsSince(start, gpu.HostWaits()), "%v: a step on a GPU-built map waits for the device", mth)
				require.False(t, m.Loaded(), "a step loads no host table")

				for _, r := range outs {
					e := relL2(host(t, r.out), r.want)
					require.LessOrEqualf(t, e, bound(mth), "%s: relative error", r.what)
					gpu.Free(r.out)
				}
				gpu.Free(py, arg, pg, ay, ag, x, w, b, dy, px)
			}
			require.False(t, m.Loaded())
			gxSameMap(t, gpu, m, mp.cpu) // loads, once, and compares the tables
		})
	}
}

// TestGPUMapPairsWaitOnce: without DeriveTables the first weight gradient
// derives the pair lists, waiting once for their segment table ((V−1)/2+1
// int64 for a submanifold map's half lists, see TablePairs); nothing else
// in a step waits.
func TestGPUMapPairsWaitOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(73, 74))
	mp := lzScene(t, 12, 1)[0]
	m := mp.gpu
	ref := cpuReference(t, rng, mp.cpu, 8, 16)
	x := dev(t, m.NIn, ref.ci, ref.x, sparse.Float32)
	w := dev(t, ref.co, m.V()*ref.ci, ref.w, sparse.Float32)
	b := dev(t, 1, ref.co, ref.b, sparse.Float32)
	dy := dev(t, m.NOut, ref.co, ref.dy, sparse.Float32)
	defer gpu.Free(x, w, b, dy)
	o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}
	start := gpu.HostWaits()
	y, err := gpu.Forward(m, x, w, b, o)
	require.NoError(t, err)
	dx, err := gpu.InputGrad(m, dy, w, o)
	require.NoError(t, err)
	require.Equal(t, HostWaits{}, gxWaitsSince(start, gpu.HostWaits()), "masked tables are derived without waiting")
	o.Algorithm = sparse.ImplicitSplitK
	require.Equal(t, kmap.Submanifold, m.Kind)
	segBytes := int64((m.V()-1)/2+1) * 8
	dw, err := gpu.WeightGrad(m, x, dy, o)
	require.NoError(t, err)
	require.Equal(t, HostWaits{Waits: 1, Downloads: 1, DownloadBytes: segBytes}, gxWaitsSince(start, gpu.HostWaits()))
	dw2, err := gpu.WeightGrad(m, x, dy, o)
	require.NoError(t, err)
	require.Equal(t, HostWaits{Waits: 1, Downloads: 1, DownloadBytes: segBytes}, gxWaitsSince(start, gpu.HostWaits()))
	require.False(t, m.Loaded())
	for _, r := range []struct {
		got  sparse.Matrix
		want []float64
	}{{y, ref.y}, {dx, ref.dx}, {dw, ref.dw}, {dw2, ref.dw}} {
		require.LessOrEqual(t, relL2(host(t, r.got), r.want), bound(kernels.F32))
		gpu.Free(r.got)
	}
	// The split count follows the longest tap segment, as before the pair
	// lists moved to the device: the centre tap has every row.
	require.NoError(t, gpu.d.do(func() error {
		pb := gpu.entry(m).pairs
		if pb == nil {
			return fmt.Errorf("no pair lists cached after a weight gradient")
		}
		if got := pb.st.longest; got != int64(m.NOut) {
			return fmt.Errorf("longest segment %d, want %d", got, m.NOut)
		}
		return nil
	}))
}

// TestGPUMapHostUse: host consumers load a GPU-built map once (the CPU
// engine, kmap's accessors) and agree with the CPU twin bit for bit;
// OutCoords chains builds on the device.
func TestGPUMapHostUse(t *testing.T) {
	for i, mp := range lzScene(t, 12, 2) {
		m := mp.gpu
		// CPU convolution on a GPU-built map loads it, once.
		ref := cpuReference(t, rand.New(rand.NewPCG(75, uint64(i))), mp.cpu, 3, 5)
		before := gpu.HostWaits()
		got := cpuReference(t, rand.New(rand.NewPCG(75, uint64(i))), m, 3, 5)
		require.True(t, m.Loaded())
		loads := gxWaitsSince(before, gpu.HostWaits())
		require.Positive(t, loads.Downloads, mp.name)
		require.LessOrEqual(t, loads.Downloads, int64(3), "%s: one download per missing table", mp.name)
		require.Equal(t, ref, got, "%s: the CPU engine on the GPU-built map", mp.name)
		require.Equal(t, mp.cpu.Nbr, m.Nbr)
		require.Equal(t, mp.cpu.InCoords, m.InCoords)
		require.Equal(t, mp.cpu.OutCoords, m.OutCoords)
		require.Equal(t, mp.cpu.Reverse(), m.Reverse())
		require.Equal(t, mp.cpu.Pairs(), m.Pairs())
		require.NoError(t, m.Validate())
		require.Equal(t, loads, gxWaitsSince(before, gpu.HostWaits()), "%s: derived host structures download nothing more", mp.name)
	}
	// A map built on the device keeps its output coordinates there: the
	// next level is built from them without a host round trip.
	coords, ext := synth.SphereShell(24, 1)
	dc := gxCoords(t, gpu, coords)
	defer gpu.Free(dc)
	down := grid.Cube(2, 2, 0, 1)
	l1 := gxBuild(t, gpu, func() (*kmap.Map, error) { return gpu.StridedMap(dc, ext, down, sparse.Matrix{}) })
	before := gpu.HostWaits()
	oc, err := gpu.OutCoords(l1)
	require.NoError(t, err)
	require.Equal(t, HostWaits{}, gxWaitsSince(before, gpu.HostWaits()))
	l2 := gxBuild(t, gpu, func() (*kmap.Map, error) { return gpu.StridedMap(oc, l1.Out, down, sparse.Matrix{}) })
	gpu.Free(oc)
	c1 := mapOK(t)(kmap.NewStrided(coords, ext, down, nil))
	c2 := mapOK(t)(kmap.NewStrided(c1.OutCoords, c1.Out, down, nil))
	gxSameMap(t, gpu, l2, c2)
	gxSameMap(t, gpu, l1, c1)
	// OutCoords of a host map uploads its host coordinates, checked.
	hc, err := gpu.OutCoords(c1)
	require.NoError(t, err)
	require.Equal(t, c1.OutCoords, gxI32(t, gpu, hc))
	gpu.Free(hc)
	_, err = gpu.OutCoords(&kmap.Map{Kind: kmap.Strided, Conv: down, NOut: 1, Nbr: make([]int32, down.Volume())})
	require.ErrorIs(t, err, sparse.ErrShape)
	_, err = gpu.OutCoords(nil)
	require.ErrorIs(t, err, sparse.ErrShape)
}

// TestGPUMapRelease: ReleaseMap makes an unloaded GPU-built map unusable
// (ErrReleased from every use, never a panic); ForgetMap keeps it usable
// by loading it first.
func TestGPUMapRelease(t *testing.T) {
	rng := rand.New(rand.NewPCG(77, 78))
	coords, ext := synth.SphereShell(10, 1)
	cpuMap := mapOK(t)(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	build := func() *kmap.Map {
		dc := gxCoords(t, gpu, coords)
		defer gpu.Free(dc)
		return gxBuild(t, gpu, func() (*kmap.Map, error) { return gpu.SubmanifoldMap(dc, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}) })
	}
	ref := cpuReference(t, rng, cpuMap, 4, 6)
	x := dev(t, cpuMap.NIn, ref.ci, ref.x, sparse.Float32)
	w := dev(t, ref.co, cpuMap.V()*ref.ci, ref.w, sparse.Float32)
	b := dev(t, 1, ref.co, ref.b, sparse.Float32)
	defer gpu.Free(x, w, b)
	o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicit}}

	m := build()
	gpu.ReleaseMap(m)
	require.ErrorIs(t, m.Load(), ErrReleased)
	_, err := gpu.Forward(m, x, w, b, o)
	require.ErrorIs(t, err, ErrReleased)
	_, err = gpu.OutCoords(m)
	require.ErrorIs(t, err, ErrReleased)
	_, err = sparse.Conv(m, sparse.Matrix{Rows: m.NIn, Cols: ref.ci, Data: f64(ref.x)},
		sparse.Matrix{Rows: ref.co, Cols: m.V() * ref.ci, Data: f64(ref.w)}, sparse.Matrix{}, sparse.ConvOptions{})
	require.ErrorIs(t, err, ErrReleased)
	require.Panics(t, func() { m.Reverse() }, "an accessor without an error result panics, with ErrReleased")
	require.False(t, m.Loaded())

	st := gxBuild(t, gpu, func() (*kmap.Map, error) {
		return gpu.StridedMap(sparse.Matrix{Rows: len(coords) / 4, Cols: 4, Data: coords}, ext, grid.Cube(2, 2, 0, 1), sparse.Matrix{})
	})
	gpu.ReleaseMap(st)
	_, err = gpu.InverseMap(st)
	require.ErrorIs(t, err, ErrReleased)

	// ForgetMap loads first: the map stays usable (uploaded again).
	f := build()
	gpu.ForgetMap(f)
	require.True(t, f.Loaded())
	require.True(t, slices.Equal(cpuMap.Nbr, f.Nbr))
	y, err := gpu.Forward(f, x, w, b, o)
	require.NoError(t, err)
	require.LessOrEqual(t, relL2(host(t, y), ref.y), bound(kernels.F32))
	gpu.Free(y)
	gpu.ForgetMap(f)
	require.True(t, f.Loaded())
}

// gxSettled returns the memory in use once the GC cleanups of maps and
// buffers that earlier tests dropped have run (they free asynchronously):
// after a GC, until two readings agree.
func gxSettled(t *testing.T) int64 {
	t.Helper()
	prev := int64(-1)
	for range 50 {
		runtime.GC()
		time.Sleep(2 * time.Millisecond)
		require.NoError(t, gpu.Synchronize())
		now := gpu.MemStats().InUse
		if now == prev {
			return now
		}
		prev = now
	}
	t.Fatal("memory in use did not settle")
	return 0
}

// TestGPUMapBorrowsCoords checks that maps keep the caller's device
// coordinates without a copy (keepCoords): building a map adds no
// coordinate block, freeing the caller's buffer defers its release while
// a map holds it — the map's coordinates survive a new buffer of the same
// size, which would reuse a released block — and dropping the map gives
// everything back.
func TestGPUMapBorrowsCoords(t *testing.T) {
	coords, ext := synth.SphereShell(12, 1)
	n := len(coords) / 4
	for _, tc := range []struct {
		name  string
		build func(dc sparse.Matrix) (*kmap.Map, error)
	}{
		{"submanifold", func(dc sparse.Matrix) (*kmap.Map, error) {
			return gpu.SubmanifoldMap(dc, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
		}},
		{"strided onto given outputs", func(dc sparse.Matrix) (*kmap.Map, error) {
			return gpu.StridedMap(dc, ext, grid.Cube(3, 1, 1, 1), dc)
		}},
		{"transposed", func(dc sparse.Matrix) (*kmap.Map, error) {
			return gpu.TransposedMap(dc, ext, grid.Cube(2, 2, 0, 1))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := gxSettled(t)
			dc := gxCoords(t, gpu, coords)
			withCoords := gpu.MemStats().InUse
			m, err := tc.build(dc)
			require.NoError(t, err)
			built := gpu.MemStats().InUse
			mine, err := gpu.SubmanifoldMap(sparse.Matrix{Rows: n, Cols: 4, Data: coords}, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
			require.NoError(t, err)
			hostBuilt := gpu.MemStats().InUse
			gpu.ReleaseMap(mine)
			require.Equal(t, built, gpu.MemStats().InUse, "a map of host coordinates releases all it took")
			if tc.name == "submanifold" {
				// The same map from host coordinates owns its upload: it
				// takes exactly one coordinate block more than the borrowing one.
				require.Equal(t, hostBuilt-built, built-withCoords+roundSize(int64(n)*16))
			}

			gpu.Free(dc)
			require.Equal(t, built, gpu.MemStats().InUse, "the map still holds the freed coordinates")
			filler := make([]int32, len(coords))
			for i := range filler {
				filler[i] = -7
			}
			other := gxCoords(t, gpu, filler)
			if tc.name != "transposed" {
				oc, err := gpu.OutCoords(m)
				require.NoError(t, err)
				require.Equal(t, coords, gxI32(t, gpu, oc), "the map's coordinates survive the caller's Free")
				gpu.Free(oc)
			}
			require.NoError(t, m.Load())
			require.Equal(t, coords, m.InCoords)
			gpu.Free(other)
			gpu.ReleaseMap(m)
			require.Equal(t, before, gpu.MemStats().InUse, "nothing is left once the map is dropped")
		})
	}
}
