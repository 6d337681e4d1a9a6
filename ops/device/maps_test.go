package device_test

// Kernel maps of device coordinates (sparse.SubmanifoldMapOf,
// StridedMapOf, TransposedMapOf, InverseMapOf) through a Device: the
// registered proxy forwards them to the backend, the maps equal the host
// builders', convolutions on the device with them equal the host's, and
// they outlive the step whose coordinates they were built from.

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/internal/maptest"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// mapScene is a coordinate set of the map tests.
type mapScene struct {
	name   string
	coords []int32
	ext    grid.Extent
}

// mapScenes: a batch of 3 shells, a random scene in rows not in key order,
// a wide-key grid (more than 2^32 sites), one voxel, none.
func mapScenes() []mapScene {
	rng := rand.New(rand.NewPCG(5, 6))
	shell, sext := synth.SphereShell(12, 3)
	rext := grid.Extent{Batch: 2, X: 9, Y: 7, Z: 11}
	random := synth.RandomScene(rng, rext, 0.3)
	n := len(random) / 4
	shuffled := make([]int32, 0, len(random))
	for _, i := range rng.Perm(n) {
		shuffled = append(shuffled, random[4*i:4*i+4]...)
	}
	wide := grid.Extent{Batch: 3, X: 4000, Y: 3000, Z: 1000}
	var wc []int32
	for _, c := range [][4]int32{{0, 0, 0, 0}, {0, 1, 0, 0}, {1, 3999, 2999, 999}, {2, 2000, 1500, 500}, {2, 2001, 1500, 501}, {2, 2000, 1501, 500}} {
		wc = append(wc, c[:]...)
	}
	small := grid.Extent{Batch: 1, X: 5, Y: 5, Z: 5}
	return []mapScene{
		{"shell-batch3", shell, sext},
		{"random-shuffled", shuffled, rext},
		{"wide-keys", wc, wide},
		{"one-voxel", []int32{0, 4, 1, 3}, small},
		{"empty", nil, small},
	}
}

// sceneMaps are the maps of one scene, built from device coordinates, and
// the host builders' maps of the same coordinates.
type sceneMaps struct {
	names     []string
	dev, host []*kmap.Map
}

var (
	mapKernel   = [3]int{3, 3, 3}
	mapDilation = [3]int{1, 1, 1}
	mapDown     = grid.Cube(2, 2, 0, 1)
)

// buildSceneMaps builds the submanifold, strided (generated and given
// outputs), inverse and transposed maps of sc from device coordinates dc,
// and their host twins.
func buildSceneMaps(t *testing.T, d *device.Device, sc mapScene, dc sparse.Matrix) sceneMaps {
	t.Helper()
	ok := func(m *kmap.Map, err error) *kmap.Map {
		t.Helper()
		require.NoError(t, err)
		return m
	}
	hSub := ok(kmap.NewSubmanifold(sc.coords, sc.ext, mapKernel, mapDilation))
	hSt := ok(kmap.NewStrided(sc.coords, sc.ext, mapDown, nil))
	// Given outputs: the generated ones in reverse row order.
	var given []int32
	for r := hSt.NOut - 1; r >= 0; r-- {
		given = append(given, hSt.OutCoords[4*r:4*r+4]...)
	}
	hGiven := ok(kmap.NewStrided(sc.coords, sc.ext, mapDown, given))
	dGivenCoords, err := d.Upload(sparse.Matrix{Rows: len(given) / 4, Cols: 4, Data: given}, sparse.Int32, device.Inputs)
	require.NoError(t, err)

	dSub := ok(sparse.SubmanifoldMapOf(dc, sc.ext, mapKernel, mapDilation))
	dSt := ok(sparse.StridedMapOf(dc, sc.ext, mapDown, sparse.Matrix{}))
	dGiven := ok(sparse.StridedMapOf(dc, sc.ext, mapDown, dGivenCoords))
	dInv := ok(sparse.InverseMapOf(dSt))
	dTr := ok(sparse.TransposedMapOf(dc, sc.ext, mapDown))
	d.Release(dGivenCoords) // the maps keep their own copies
	return sceneMaps{
		names: []string{"submanifold", "strided", "strided-given", "inverse", "transposed"},
		dev:   []*kmap.Map{dSub, dSt, dGiven, dInv, dTr},
		host: []*kmap.Map{hSub, hSt, hGiven, ok(kmap.NewInverse(hSt)),
			ok(kmap.NewTransposed(sc.coords, sc.ext, mapDown))},
	}
}

// convOnDevice runs the forward, input and weight gradients of a
// convolution with m on d (operands uploaded as float32) and on the host
// with hm (the host twin), and requires the results to agree within tol
// (relative to the largest host magnitude).
func convOnDevice(t *testing.T, d *device.Device, m, hm *kmap.Map, tol float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(hm.NIn), uint64(hm.NOut)))
	ci, co := 3, 5
	V := hm.V()
	host := func(rows, cols int) sparse.Matrix {
		return sparse.Matrix{Rows: rows, Cols: cols, Data: synth.Uniform[float32](rng, rows*cols)}
	}
	x, w, b, dy := host(hm.NIn, ci), host(co, V*ci), host(1, co), host(hm.NOut, co)
	up := func(h sparse.Matrix) sparse.Matrix {
		m, err := d.Upload(h, sparse.Float32, device.Inputs)
		require.NoError(t, err)
		return m
	}
	dx, dw, db, ddy := up(x), up(w), up(b), up(dy)
	opt := sparse.ConvOptions{Algorithm: sparse.Implicit}
	type pair struct {
		what     string
		dev, ref sparse.Matrix
	}
	var ps []pair
	y, err := sparse.Conv(m, dx, dw, db, opt)
	require.NoError(t, err)
	ry, err := sparse.Conv(hm, x, w, b, opt)
	require.NoError(t, err)
	ps = append(ps, pair{"forward", y, ry})
	gx, err := sparse.ConvInputGrad(m, ddy, dw, opt)
	require.NoError(t, err)
	rgx, err := sparse.ConvInputGrad(hm, dy, w, opt)
	require.NoError(t, err)
	ps = append(ps, pair{"input grad", gx, rgx})
	gw, err := sparse.ConvWeightGrad(m, dx, ddy, opt)
	require.NoError(t, err)
	rgw, err := sparse.ConvWeightGrad(hm, x, dy, opt)
	require.NoError(t, err)
	ps = append(ps, pair{"weight grad", gw, rgw})
	for _, p := range ps {
		require.True(t, d.Owns(p.dev), "%s: the result lives on the device", p.what)
		h, err := d.Download(p.dev, device.Other)
		require.NoError(t, err)
		got, want := h.F32(), p.ref.F32()
		require.Equal(t, len(want), len(got), p.what)
		var scale float64
		for _, v := range want {
			scale = max(scale, float64(abs32(v)))
		}
		for i := range want {
			require.InDelta(t, want[i], got[i], tol*max(scale, 1), "%s[%d]", p.what, i)
		}
	}
	d.Release(dx, dw, db, ddy, y, gx, gw)
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

// TestMapsOfDeviceCoordinatesOnFake builds every map of a UNet from
// coordinates uploaded inside a step of the fake device, ends that step
// (which releases the coordinates), and then compares the maps with the
// host builders' and convolves with them on the device in a later step.
// Building the maps copies nothing between host and device that the
// Device counts, and each build through the proxy is profiled as "kmap".
func TestMapsOfDeviceCoordinatesOnFake(t *testing.T) {
	for _, sc := range mapScenes() {
		t.Run(sc.name, func(t *testing.T) {
			d := openFake(t)
			d.SetProfiling(true)
			st, err := d.BeginStep()
			require.NoError(t, err)
			dc, err := d.Upload(sparse.Matrix{Rows: len(sc.coords) / 4, Cols: 4, Data: sc.coords}, sparse.Int32, device.Inputs)
			require.NoError(t, err)
			before := d.Transfers()
			ms := buildSceneMaps(t, d, sc, dc)
			moved := d.Transfers().Sub(before)
			var want device.Transfers
			want.Up[device.Inputs] = int64(ms.host[1].NOut) * 16
			require.Equal(t, want, moved, "only the given output coordinates were uploaded")
			require.Equal(t, 4, d.Profile()["kmap"].Calls, "four builds through the proxy (the inverse of a host map needs none)")
			require.NoError(t, st.End())
			_, err = d.Download(dc, device.Other)
			require.ErrorIs(t, err, device.ErrReleased, "the step released the coordinates")

			st2, err := d.BeginStep()
			require.NoError(t, err)
			defer st2.End()
			for i, m := range ms.dev {
				t.Run(ms.names[i], func(t *testing.T) {
					maptest.RequireSameMap(t, ms.host[i], m)
					convOnDevice(t, d, m, ms.host[i], 1e-5)
				})
			}
		})
	}
}

// noMapsMemory is a backend whose Memory cannot build kernel maps.
type noMapsMemory struct{ device.Memory }

func TestMapsOfErrorsOnFake(t *testing.T) {
	d := openFake(t)
	ext := grid.Extent{Batch: 1, X: 6, Y: 6, Z: 6}
	up := func(c []int32, cols int) sparse.Matrix {
		m, err := d.Upload(sparse.Matrix{Rows: len(c) / cols, Cols: cols, Data: c}, sparse.Int32, device.Other)
		require.NoError(t, err)
		return m
	}
	dup := up([]int32{0, 1, 1, 1, 0, 2, 2, 2, 0, 1, 1, 1}, 4)
	_, err := sparse.SubmanifoldMapOf(dup, ext, mapKernel, mapDilation)
	require.ErrorIs(t, err, sparse.ErrDuplicate)
	require.ErrorIs(t, err, kmap.ErrDuplicate)
	require.ErrorContains(t, err, "rows 0 and 2")
	_, err = sparse.TransposedMapOf(dup, ext, mapDown)
	require.ErrorIs(t, err, sparse.ErrDuplicate)
	out := up([]int32{0, 1, 1, 1, 0, 6, 2, 2}, 4)
	_, err = sparse.StridedMapOf(out, ext, mapDown, sparse.Matrix{})
	require.ErrorIs(t, err, sparse.ErrOutOfRange)
	ok := up([]int32{0, 1, 1, 1}, 4)
	_, err = sparse.SubmanifoldMapOf(ok, ext, [3]int{2, 3, 3}, mapDilation)
	require.ErrorIs(t, err, grid.ErrBadGeometry)
	_, err = sparse.StridedMapOf(ok, ext, mapDown, up([]int32{0, 9, 0, 0}, 4))
	require.ErrorIs(t, err, sparse.ErrOutOfRange)
	_, err = sparse.SubmanifoldMapOf(up([]int32{0, 1, 1}, 3), ext, mapKernel, mapDilation)
	require.ErrorIs(t, err, sparse.ErrShape)
	f32, err := d.Upload(sparse.Matrix{Rows: 1, Cols: 4, Data: []float32{0, 1, 1, 1}}, sparse.Float32, device.Other)
	require.NoError(t, err)
	_, err = sparse.SubmanifoldMapOf(f32, ext, mapKernel, mapDilation)
	require.ErrorIs(t, err, sparse.ErrDType)
	// Released coordinates are an error, not a map of garbage.
	gone := up([]int32{0, 1, 1, 1}, 4)
	d.Release(gone)
	_, err = sparse.SubmanifoldMapOf(gone, ext, mapKernel, mapDilation)
	require.ErrorIs(t, err, device.ErrReleased)
	_, err = sparse.InverseMapOf(nil)
	require.ErrorIs(t, err, kmap.ErrMap)
	sub, err := sparse.SubmanifoldMapOf(ok, ext, mapKernel, mapDilation)
	require.NoError(t, err)
	_, err = sparse.InverseMapOf(sub)
	require.ErrorIs(t, err, kmap.ErrMap)
	require.ErrorContains(t, err, "needs a strided map")

	// The Fake's methods, called directly, take host coordinates too.
	f := device.NewFake()
	hm, err := f.SubmanifoldMap(sparse.Matrix{Rows: 1, Cols: 4, Data: []int32{0, 1, 1, 1}}, ext, mapKernel, mapDilation)
	require.NoError(t, err)
	require.Equal(t, 1, hm.NOut)
	_, err = f.StridedMap(ok, ext, mapDown, sparse.Matrix{})
	require.ErrorIs(t, err, device.ErrMixed, "coordinates of another device")

	// A backend that cannot build maps: the proxy says so.
	nf := device.NewFake()
	nd, err := device.New(noMapsMemory{nf}, nf)
	require.NoError(t, err)
	defer nd.Close()
	nc, err := nd.Upload(sparse.Matrix{Rows: 1, Cols: 4, Data: []int32{0, 1, 1, 1}}, sparse.Int32, device.Other)
	require.NoError(t, err)
	for name, build := range map[string]func() error{
		"submanifold": func() error { _, err := sparse.SubmanifoldMapOf(nc, ext, mapKernel, mapDilation); return err },
		"strided":     func() error { _, err := sparse.StridedMapOf(nc, ext, mapDown, sparse.Matrix{}); return err },
		"transposed":  func() error { _, err := sparse.TransposedMapOf(nc, ext, mapDown); return err },
	} {
		err := build()
		require.ErrorIs(t, err, sparse.ErrNoEngine, name)
		require.ErrorContains(t, err, "cannot build kernel maps", name)
	}
}

func ExampleFake_StridedMap() {
	d, err := device.OpenFake()
	if err != nil {
		panic(err)
	}
	defer d.Close()
	coords, err := d.Upload(sparse.Matrix{Rows: 3, Cols: 4, Data: []int32{0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 2, 2}}, sparse.Int32, device.Inputs)
	if err != nil {
		panic(err)
	}
	ext := sparse.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	down, err := sparse.StridedMapOf(coords, ext, grid.Cube(2, 2, 0, 1), sparse.Matrix{})
	if err != nil {
		panic(err)
	}
	up, err := sparse.InverseMapOf(down)
	if err != nil {
		panic(err)
	}
	fmt.Println(down.NOut, up.NOut, up.Kind)
	// Output: 2 3 inverse
}
