package sparse

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

var unitVoxels = VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}}

// voxelRef is a brute-force Voxelize: a map from voxel to its points in
// point order, then a sort of the distinct voxels.
func voxelRef[T Float](points []T, feats []T, c int, opt VoxelizeOptions) (coords []int32, means []T, index, counts []int32) {
	p := len(points) / 3
	members := map[[4]int32][]int{}
	index = make([]int32, p)
	vox := make([][4]int32, p)
	for i := range p {
		var v [4]int32
		if opt.Batch != nil {
			v[0] = opt.Batch[i]
		}
		ok := true
		for a := range 3 {
			f := math.Floor((float64(points[3*i+a]) - opt.Origin[a]) / opt.VoxelSize[a])
			if f < 0 || f > math.MaxInt32 {
				ok = false
			}
			v[a+1] = int32(f)
		}
		if ok && opt.Extent != (Extent{}) {
			ok = opt.Extent.Contains(int(v[0]), int(v[1]), int(v[2]), int(v[3]))
		}
		vox[i] = v
		index[i] = -1
		if ok {
			members[v] = append(members[v], i)
		}
	}
	keys := make([][4]int32, 0, len(members))
	for v := range members {
		keys = append(keys, v)
	}
	slices.SortFunc(keys, func(a, b [4]int32) int { return slices.Compare(a[:], b[:]) })
	for r, v := range keys {
		coords = append(coords, v[:]...)
		counts = append(counts, int32(len(members[v])))
		for j := range c {
			var s float64
			for _, i := range members[v] {
				s += float64(feats[i*c+j])
			}
			means = append(means, T(s/float64(len(members[v]))))
		}
		for _, i := range members[v] {
			index[i] = int32(r)
		}
	}
	return coords, means, index, counts
}

func randomCloud[T Float](rng *rand.Rand, p, c int, span float64) (points, feats []T) {
	points = make([]T, 3*p)
	for i := range points {
		points[i] = T(rng.Float64()*span - 0.25*span)
	}
	feats = make([]T, p*c)
	for i := range feats {
		feats[i] = T(rng.NormFloat64())
	}
	return points, feats
}

func checkVoxelize[T Float](t *testing.T, rng *rand.Rand, p, c int, opt VoxelizeOptions) {
	t.Helper()
	points, feats := randomCloud[T](rng, p, c, 20)
	fm, err := MatrixOf(p, c, feats)
	require.NoError(t, err)
	got, err := Voxelize(points, fm, opt)
	require.NoError(t, err)
	coords, means, index, counts := voxelRef(points, feats, c, opt)
	require.Equal(t, len(coords), len(got.Coords))
	if len(coords) > 0 {
		require.Equal(t, coords, got.Coords)
		require.Equal(t, counts, got.Counts)
	}
	require.Equal(t, index, got.Index)
	gotFeats, ok := got.Feats.Data.([]T)
	require.True(t, ok, "features keep their element type")
	require.Equal(t, len(coords)/4, got.Feats.Rows)
	require.Equal(t, c, got.Feats.Cols)
	if len(means) > 0 {
		require.Equal(t, means, gotFeats, "means are bit-identical to a float64 sum in point order")
	}
	// The result is a valid tensor in its extent.
	require.NoError(t, ValidateCoords(got.Coords, got.Extent))
	tt, err := got.Tensor()
	require.NoError(t, err)
	require.Equal(t, len(coords)/4, tt.N())
	if opt.Extent != (Extent{}) {
		require.Equal(t, opt.Extent, got.Extent)
	} else if len(coords) > 0 {
		var hi [4]int32
		for r := 0; r < len(coords); r += 4 {
			for a := range 4 {
				hi[a] = max(hi[a], coords[r+a])
			}
		}
		require.Equal(t, Extent{Batch: int(hi[0]) + 1, X: int(hi[1]) + 1, Y: int(hi[2]) + 1, Z: int(hi[3]) + 1}, got.Extent, "the derived extent is tight")
	}
}

func TestVoxelizeMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	batch := func(p, b int) []int32 {
		out := make([]int32, p)
		for i := range out {
			out[i] = int32(rng.IntN(b))
		}
		return out
	}
	for i, tc := range []struct {
		p, c int
		opt  VoxelizeOptions
	}{
		{p: 2000, c: 3, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Origin: [3]float64{-5, -5, -5}}},
		{p: 2000, c: 1, opt: VoxelizeOptions{VoxelSize: [3]float64{0.5, 2, 0.3}, Origin: [3]float64{-5, -6, -7}, Batch: batch(2000, 3)}},
		{p: 50000, c: 2, opt: VoxelizeOptions{VoxelSize: [3]float64{0.25, 0.25, 0.25}, Origin: [3]float64{-5.5, -5.5, -5.5}, Batch: batch(50000, 2)}},
		{p: 3000, c: 4, opt: VoxelizeOptions{VoxelSize: [3]float64{3, 3, 3}, Origin: [3]float64{-6, -6, -6}}}, // many points per voxel
		{p: 2000, c: 2, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, DropOutside: true}},              // a quarter below the origin
		{p: 2000, c: 2, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Origin: [3]float64{-5, -5, -5}, DropOutside: true, Extent: Extent{Batch: 2, X: 10, Y: 30, Z: 12}, Batch: batch(2000, 3)}},
		{p: 2000, c: 0, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Origin: [3]float64{-5, -5, -5}}},
		{p: 0, c: 3, opt: unitVoxels},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			checkVoxelize[float32](t, rng, tc.p, tc.c, tc.opt)
			checkVoxelize[float64](t, rng, tc.p, tc.c, tc.opt)
		})
	}
}

func TestVoxelizeFloor(t *testing.T) {
	// Points below the origin fall in negative voxels (floor, not
	// truncation toward zero), which are outside any grid.
	pts := []float64{-0.5, 0.2, 0.2}
	_, err := Voxelize(pts, Matrix{}, unitVoxels)
	require.ErrorIs(t, err, ErrOutOfRange)
	require.ErrorContains(t, err, "point 0 (-0.5, 0.2, 0.2)")
	v, err := Voxelize(pts, Matrix{}, VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, DropOutside: true})
	require.NoError(t, err)
	require.Empty(t, v.Coords)
	require.Equal(t, []int32{-1}, v.Index)
	require.Equal(t, Extent{Batch: 1, X: 1, Y: 1, Z: 1}, v.Extent)

	for i, tc := range []struct {
		p, origin, size float64
		want            int32
	}{
		{p: -0.5, origin: -1, size: 1, want: 0},
		{p: -0.25, origin: -1, size: 0.5, want: 1},
		{p: -1, origin: -3, size: 1, want: 2},   // on a face: the upper voxel
		{p: 1.5, origin: 0, size: 0.5, want: 3}, // exact multiple
		{p: 0.999, origin: 0, size: 1, want: 0},
		{p: -2.5, origin: -7.5, size: 2.5, want: 2},
	} {
		v, err := Voxelize([]float64{tc.p, tc.p, tc.p}, Matrix{}, VoxelizeOptions{
			VoxelSize: [3]float64{tc.size, tc.size, tc.size}, Origin: [3]float64{tc.origin, tc.origin, tc.origin},
		})
		require.NoError(t, err, "case %d", i)
		require.Equal(t, []int32{0, tc.want, tc.want, tc.want}, v.Coords, "case %d", i)
	}
}

func TestVoxelizeExample(t *testing.T) {
	// Five points, two of them in voxel (0, 1, 0, 0) and two in batch 1.
	pts := []float32{
		1.5, 0.5, 0.5,
		0.2, 2.7, 0.1,
		1.1, 0.9, 0.0,
		0.5, 0.5, 0.5,
		0.5, 0.5, 0.5,
	}
	feats, err := MatrixOf(5, 2, []float32{1, 10, 2, 20, 3, 30, 4, 40, 5, 50})
	require.NoError(t, err)
	v, err := Voxelize(pts, feats, VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Batch: []int32{0, 0, 0, 1, 1}})
	require.NoError(t, err)
	require.Equal(t, []int32{0, 0, 2, 0, 0, 1, 0, 0, 1, 0, 0, 0}, v.Coords)
	require.Equal(t, []float32{2, 20, 2, 20, 4.5, 45}, v.Feats.F32())
	require.Equal(t, []int32{1, 0, 1, 2, 2}, v.Index)
	require.Equal(t, []int32{1, 2, 2}, v.Counts)
	require.Equal(t, Extent{Batch: 2, X: 2, Y: 3, Z: 1}, v.Extent)
}

func TestVoxelizeErrors(t *testing.T) {
	pts := []float64{0, 0, 0, 1, 1, 1}
	f2 := Matrix{Rows: 2, Cols: 1, Data: []float64{1, 2}}
	nan, inf := math.NaN(), math.Inf(1)
	for i, tc := range []struct {
		pts   []float64
		feats Matrix
		opt   VoxelizeOptions
		err   error
		msg   string
	}{
		{pts: pts[:5], opt: unitVoxels, err: ErrShape, msg: "length 5"},
		{pts: pts, feats: Matrix{Rows: 3, Cols: 1, Data: []float64{1, 2, 3}}, opt: unitVoxels, err: ErrShape, msg: "feats"},
		{pts: pts, feats: Matrix{Rows: 2, Cols: 1, Data: []float64{1}}, opt: unitVoxels, err: ErrShape},
		{pts: pts, feats: Matrix{Rows: 2, Cols: 1, Data: []int32{1, 2}}, opt: unitVoxels, err: ErrDType},
		{pts: pts, feats: Matrix{Rows: 2, Cols: 1, Data: fakeStorage2{}}, opt: unitVoxels, err: ErrDType},
		{pts: pts, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Batch: []int32{0}}, err: ErrShape, msg: "1 batch indices for 2 points"},
		{pts: pts, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Batch: []int32{0, -1}, DropOutside: true}, err: ErrOutOfRange, msg: "point 1 has negative batch index -1"},
		{pts: pts, opt: VoxelizeOptions{}, err: ErrOutOfRange, msg: "voxel size"},
		{pts: pts, opt: VoxelizeOptions{VoxelSize: [3]float64{1, -1, 1}}, err: ErrOutOfRange, msg: "voxel size"},
		{pts: pts, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, nan}}, err: ErrOutOfRange, msg: "voxel size"},
		{pts: pts, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, inf}}, err: ErrOutOfRange, msg: "voxel size"},
		{pts: pts, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Origin: [3]float64{0, nan, 0}}, err: ErrOutOfRange, msg: "origin"},
		{pts: pts, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Extent: Extent{X: 4}}, err: grid.ErrBadExtent},
		{pts: []float64{0, 0, 0, 1, nan, 1}, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, DropOutside: true}, err: ErrOutOfRange, msg: "point 1 (1, NaN, 1) is not finite"},
		{pts: []float64{0, 0, 0, 1, 1, -inf}, opt: unitVoxels, err: ErrOutOfRange, msg: "point 1 (1, 1, -Inf) is not finite"},
		{pts: []float64{0, 0, 0, 4, 1, 1}, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Extent: Extent{Batch: 1, X: 4, Y: 4, Z: 4}}, err: ErrOutOfRange, msg: "point 1 (4, 1, 1) in batch 0 falls in a voxel that is outside Extent"},
		{pts: pts, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Batch: []int32{0, 2}, Extent: Extent{Batch: 2, X: 4, Y: 4, Z: 4}}, err: ErrOutOfRange, msg: "point 1"},
		{pts: []float64{0, 0, 0, 1e12, 1, 1}, opt: unitVoxels, err: ErrOutOfRange, msg: "past 2^31"},
		{pts: []float64{1e300, 0, 0}, opt: VoxelizeOptions{VoxelSize: [3]float64{1e-300, 1, 1}}, err: ErrOutOfRange, msg: "point 0"},
		{pts: []float64{2e9, 2e9, 2e9, 0, 0, 0}, opt: VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Batch: []int32{math.MaxInt32 - 1, 0}}, err: grid.ErrBadExtent},
	} {
		feats := tc.feats
		if i < 2 && feats.IsZero() {
			feats = f2
		}
		_, err := Voxelize(tc.pts, feats, tc.opt)
		require.ErrorIs(t, err, tc.err, "case %d", i)
		require.ErrorContains(t, err, tc.msg, "case %d", i)
	}
	// Dropping keeps the other points.
	v, err := Voxelize([]float64{0, 0, 0, 1e12, 1, 1, 3, 3, 3}, Matrix{}, VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, DropOutside: true})
	require.NoError(t, err)
	require.Equal(t, []int32{0, 0, 0, 0, 0, 3, 3, 3}, v.Coords)
	require.Equal(t, []int32{0, -1, 1}, v.Index)
	require.Equal(t, Extent{Batch: 1, X: 4, Y: 4, Z: 4}, v.Extent)
	_, err = v.Tensor()
	require.ErrorIs(t, err, ErrShape, "no features, no tensor")
}

type fakeStorage2 struct{}

func (fakeStorage2) DType() DType { return BFloat16 }
func (fakeStorage2) Len() int     { return 2 }

func TestVoxelizeEmpty(t *testing.T) {
	for _, opt := range []VoxelizeOptions{unitVoxels, {VoxelSize: [3]float64{1, 1, 1}, Extent: Extent{Batch: 3, X: 2, Y: 2, Z: 2}}} {
		v, err := Voxelize([]float32{}, Matrix{Rows: 0, Cols: 5, Data: []float32{}}, opt)
		require.NoError(t, err)
		require.Empty(t, v.Coords)
		require.Empty(t, v.Index)
		require.Empty(t, v.Counts)
		require.Equal(t, 0, v.Feats.Rows)
		require.Equal(t, 5, v.Feats.Cols)
		if opt.Extent != (Extent{}) {
			require.Equal(t, opt.Extent, v.Extent)
		} else {
			require.Equal(t, Extent{Batch: 1, X: 1, Y: 1, Z: 1}, v.Extent)
		}
		tt, err := v.Tensor()
		require.NoError(t, err)
		require.Equal(t, 0, tt.N())
	}
	v, err := Voxelize[float64](nil, Matrix{}, unitVoxels)
	require.NoError(t, err)
	require.True(t, v.Feats.IsZero())
}

func TestVoxelizeIsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := 5*voxelChunk + 77
	points, feats := randomCloud[float32](rng, p, 3, 8)
	fm, err := MatrixOf(p, 3, feats)
	require.NoError(t, err)
	opt := VoxelizeOptions{VoxelSize: [3]float64{0.5, 0.5, 0.5}, Origin: [3]float64{-2, -2, -2}}
	points[3*(4*voxelChunk+3)] = float32(math.NaN())
	points[3*(2*voxelChunk+9)+1] = float32(math.Inf(-1))
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var first *Voxelization
	for _, procs := range []int{1, 2, 7} {
		runtime.GOMAXPROCS(procs)
		_, err := Voxelize(points, fm, opt)
		require.ErrorContains(t, err, fmt.Sprintf("point %d ", 2*voxelChunk+9), "the first bad point is named")
		good := slices.Clone(points)
		good[3*(4*voxelChunk+3)] = 0
		good[3*(2*voxelChunk+9)+1] = 0
		v, err := Voxelize(good, fm, opt)
		require.NoError(t, err)
		if first == nil {
			first = v
			continue
		}
		require.Equal(t, first, v, "GOMAXPROCS=%d", procs)
	}
}

func ExampleVoxelize() {
	// Four points with one feature each, in 0.5-unit voxels from the origin
	// (-1, -1, -1). The first two share a voxel; the third is dropped.
	points := []float64{
		-0.9, -0.9, -0.9,
		-0.6, -0.7, -0.9,
		-1.2, 0.0, 0.0,
		0.3, 0.3, 0.3,
	}
	feats, _ := MatrixOf(4, 1, []float64{1, 3, 100, 7})
	v, err := Voxelize(points, feats, VoxelizeOptions{
		VoxelSize:   [3]float64{0.5, 0.5, 0.5},
		Origin:      [3]float64{-1, -1, -1},
		DropOutside: true,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("coords", v.Coords)
	fmt.Println("feats ", v.Feats.F64())
	fmt.Println("index ", v.Index)
	fmt.Println("counts", v.Counts)
	fmt.Println(v.Extent)
	// Output:
	// coords [0 0 0 0 0 2 2 2]
	// feats  [2 7]
	// index  [0 0 -1 1]
	// counts [2 1]
	// Extent{Batch:1 X:3 Y:3 Z:3}
}

func BenchmarkVoxelize(b *testing.B) {
	// 4.1M points in a 40³ box with 0.05 voxels: about 3.4M occupied voxels
	// out of 800³.
	const p, c = 4_113_056, 4
	rng := rand.New(rand.NewPCG(5, 6))
	points := make([]float32, 3*p)
	for i := range points {
		points[i] = float32(rng.Float64() * 40)
	}
	fm := NewMatrix[float32](p, c)
	opt := VoxelizeOptions{VoxelSize: [3]float64{0.05, 0.05, 0.05}}
	var m int
	for b.Loop() {
		v, err := Voxelize(points, fm, opt)
		if err != nil {
			b.Fatal(err)
		}
		m = len(v.Coords) / 4
	}
	b.ReportMetric(float64(p)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mpoints/s")
	b.ReportMetric(float64(m), "voxels")
}
