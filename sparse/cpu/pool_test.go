package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// randomCoords returns the sites of ext kept with probability density, in
// (b, x, y, z) order, as a flat [N, 4] array.
func randomCoords(rng *rand.Rand, ext grid.Extent, density float64) []int32 {
	var coords []int32
	for b := range ext.Batch {
		for x := range ext.X {
			for y := range ext.Y {
				for z := range ext.Z {
					if rng.Float64() < density {
						coords = append(coords, int32(b), int32(x), int32(y), int32(z))
					}
				}
			}
		}
	}
	return coords
}

// dense is a densified coordinate set: row[key] = row index or −1.
type dense struct {
	ext grid.Extent
	row []int32
}

func densify(coords []int32, ext grid.Extent) dense {
	d := dense{ext: ext, row: make([]int32, ext.Sites())}
	for k := range d.row {
		d.row[k] = -1
	}
	for r := 0; r < len(coords)/4; r++ {
		c := coords[4*r:]
		d.row[ext.Key(int(c[0]), int(c[1]), int(c[2]), int(c[3]))] = int32(r)
	}
	return d
}

func (d dense) at(b, x, y, z int) int32 {
	if !d.ext.Contains(b, x, y, z) {
		return -1
	}
	return d.row[d.ext.Key(b, x, y, z)]
}

// Find makes dense a VoxelIndex.
func (d dense) Find(key uint64) (int32, bool) {
	if key >= uint64(len(d.row)) || d.row[key] < 0 {
		return -1, false
	}
	return d.row[key], true
}

// windowRows lists, in tap order, the input rows of the dense pooling
// window of output site (b, o) under conv: fine = o·S − P + k·D.
func windowRows(d dense, conv grid.Conv, b int, o [3]int) []int32 {
	var rows []int32
	for kx := range conv.Kernel[0] {
		for ky := range conv.Kernel[1] {
			for kz := range conv.Kernel[2] {
				k := [3]int{kx, ky, kz}
				var f [3]int
				for a := range 3 {
					f[a] = o[a]*conv.Stride[a] - conv.Padding[a] + k[a]*conv.Dilation[a]
				}
				if r := d.at(b, f[0], f[1], f[2]); r >= 0 {
					rows = append(rows, r)
				}
			}
		}
	}
	return rows
}

// densePool is the brute-force definition of sparse pooling: every output
// site of the output grid whose window holds an input, with the max (first
// in tap order on ties) or mean of the inputs in its window.
func densePool(coords []int32, ext grid.Extent, conv grid.Conv, x []float64, c int) (outCoords []int32, ymax, yavg []float64, amax []int32) {
	d := densify(coords, ext)
	out, err := conv.StridedExtent(ext)
	if err != nil {
		panic(err)
	}
	for b := range out.Batch {
		for ox := range out.X {
			for oy := range out.Y {
				for oz := range out.Z {
					rows := windowRows(d, conv, b, [3]int{ox, oy, oz})
					if len(rows) == 0 {
						continue
					}
					outCoords = append(outCoords, int32(b), int32(ox), int32(oy), int32(oz))
					for j := range c {
						best, arg, sum := math.Inf(-1), int32(-1), 0.0
						for _, r := range rows {
							v := x[int(r)*c+j]
							sum += v
							if v > best {
								best, arg = v, r
							}
						}
						ymax = append(ymax, best)
						amax = append(amax, arg)
						yavg = append(yavg, sum/float64(len(rows)))
					}
				}
			}
		}
	}
	return
}

func toT[T ~float32 | ~float64](x []float64) []T {
	out := make([]T, len(x))
	for i, v := range x {
		out[i] = T(v)
	}
	return out
}

type poolCase struct {
	name                string
	kernel, stride, pad int
	dil                 int
}

var poolCases = []poolCase{
	{"k2s1", 2, 1, 0, 1},
	{"k2s2", 2, 2, 0, 1},
	{"k2s3", 2, 3, 0, 1},
	{"k3s1p1", 3, 1, 1, 1},
	{"k3s2p1", 3, 2, 1, 1},
	{"k3s3", 3, 3, 0, 1},
	{"k3s2d2", 3, 2, 0, 2},
}

func TestPoolMatchesDense(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 7, Y: 6, Z: 5}
	for _, pc := range poolCases {
		for _, c := range []int{1, 3, 13} {
			for _, ties := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/C%d/ties=%v", pc.name, c, ties), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(pc.kernel*100+pc.stride*10+c), 7))
					coords := randomCoords(rng, ext, 0.45)
					x := make([]float64, len(coords)/4*c)
					for i := range x {
						if ties {
							x[i] = float64(rng.IntN(3)) // many equal values
						} else {
							x[i] = rng.NormFloat64()
						}
					}
					conv := grid.Cube(pc.kernel, pc.stride, pc.pad, pc.dil)
					m, err := kmap.NewStrided(coords, ext, conv, nil)
					require.NoError(t, err)
					wantCoords, ymax, yavg, amax := densePool(coords, ext, conv, x, c)
					require.Equal(t, wantCoords, m.OutCoords, "output sites")
					require.NotEmpty(t, wantCoords)

					t.Run("float64", func(t *testing.T) { checkPool(t, m, x, c, ymax, yavg, amax, 0) })
					t.Run("float32", func(t *testing.T) { checkPool(t, m, toT[float32](x), c, ymax, yavg, amax, 1e-6) })
				})
			}
		}
	}
}

func checkPool[T ~float32 | ~float64](t *testing.T, m *kmap.Map, x []T, c int, ymax, yavg []float64, amax []int32, tol float64) {
	y := make([]T, m.NOut*c)
	arg := make([]int32, m.NOut*c)
	MaxPool(m, x, c, y, arg)
	require.Equal(t, amax, arg, "argmax")
	for j := range y {
		require.Equal(t, T(ymax[j]), y[j], "max element %d", j)
	}
	for j := range y {
		y[j] = T(math.NaN()) // AvgPool must overwrite
	}
	AvgPool(m, x, c, y)
	for j := range y {
		require.InDelta(t, yavg[j], float64(y[j]), tol*(1+math.Abs(yavg[j]))+1e-15, "avg element %d", j)
	}
}

func TestMaxPoolTiesLowestTap(t *testing.T) {
	// One output (kernel 2, stride 2) over the eight sites of a 2×2×2 cube;
	// rows are listed in reverse tap order so that the lowest tap is not
	// the lowest row.
	ext := grid.Extent{Batch: 1, X: 2, Y: 2, Z: 2}
	var coords []int32
	for v := 7; v >= 0; v-- {
		coords = append(coords, 0, int32(v>>2&1), int32(v>>1&1), int32(v&1))
	}
	m, err := kmap.NewStrided(coords, ext, grid.Cube(2, 2, 0, 1), nil)
	require.NoError(t, err)
	require.Equal(t, 1, m.NOut)
	// Row r sits at tap 7 − r. Channel 0: all equal → tap 0 = row 7.
	// Channel 1: taps 3 and 5 (rows 4 and 2) share the max → row 4.
	x := make([]float64, 8*2)
	for r := range 8 {
		x[2*r] = 1.5
		x[2*r+1] = -1
	}
	x[2*4+1], x[2*2+1] = 3, 3
	y := make([]float64, 2)
	arg := make([]int32, 2)
	MaxPool(m, x, 2, y, arg)
	require.Equal(t, []float64{1.5, 3}, y)
	require.Equal(t, []int32{7, 4}, arg)

	dx := make([]float64, 16)
	MaxPoolGrad(m, []float64{10, 20}, arg, 2, dx)
	want := make([]float64, 16)
	want[2*7], want[2*4+1] = 10, 20
	require.Equal(t, want, dx)
}

func TestMaxPoolNaNAndEmpty(t *testing.T) {
	// Output 0 reads rows 0, 1 (x = 1, NaN); output 1 reads nothing.
	m := &kmap.Map{Conv: grid.Cube(2, 1, 0, 1), NIn: 2, NOut: 2, Nbr: make([]int32, 16)}
	for j := range m.Nbr {
		m.Nbr[j] = -1
	}
	m.Nbr[0], m.Nbr[3] = 0, 1
	x := []float32{1, float32(math.NaN())}
	y := []float32{7, 7}
	arg := []int32{9, 9}
	MaxPool(m, x, 1, y, arg)
	require.True(t, math.IsNaN(float64(y[0])))
	require.Equal(t, []int32{1, -1}, arg)
	require.Equal(t, float32(0), y[1])
	AvgPool(m, x, 1, y)
	require.True(t, math.IsNaN(float64(y[0])))
	require.Equal(t, float32(0), y[1])
	require.Equal(t, []int32{2, 0}, PoolCounts(m))
}

func TestPoolEmpty(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	m, err := kmap.NewStrided(nil, ext, grid.Cube(2, 2, 0, 1), nil)
	require.NoError(t, err)
	require.Zero(t, m.NOut)
	MaxPool(m, []float32{}, 3, []float32{}, []int32{})
	AvgPool(m, []float32{}, 3, []float32{})
	MaxPoolGrad(m, []float32{}, []int32{}, 3, []float32{})
	AvgPoolGrad(m, []float32{}, nil, 3, []float32{})
}

// poolLoss returns Σ r ⊙ pool(x) for the given pool.
func poolLoss(m *kmap.Map, x []float64, c int, r []float64, isMax bool) float64 {
	y := make([]float64, m.NOut*c)
	if isMax {
		MaxPool(m, x, c, y, make([]int32, len(y)))
	} else {
		AvgPool(m, x, c, y)
	}
	s := 0.0
	for j := range y {
		s += r[j] * y[j]
	}
	return s
}

func TestPoolGradFiniteDifference(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 6, Y: 5, Z: 5}
	for _, pc := range poolCases {
		for _, isMax := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/max=%v", pc.name, isMax), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(pc.kernel*10+pc.stride), 3))
				coords := randomCoords(rng, ext, 0.5)
				const c = 3
				n := len(coords) / 4
				// Distinct, well separated values: no ties and no switches
				// of the max within ±h.
				x := make([]float64, n*c)
				for i, p := range rng.Perm(len(x)) {
					x[i] = float64(p)*0.01 + 0.001*rng.Float64()
				}
				conv := grid.Cube(pc.kernel, pc.stride, pc.pad, pc.dil)
				m, err := kmap.NewStrided(coords, ext, conv, nil)
				require.NoError(t, err)
				r := make([]float64, m.NOut*c)
				for j := range r {
					r[j] = rng.NormFloat64()
				}
				dx := make([]float64, n*c)
				if isMax {
					y := make([]float64, m.NOut*c)
					arg := make([]int32, m.NOut*c)
					MaxPool(m, x, c, y, arg)
					MaxPoolGrad(m, r, arg, c, dx)
				} else {
					AvgPoolGrad(m, r, nil, c, dx)
				}
				const h = 1e-5
				for i := range x {
					old := x[i]
					x[i] = old + h
					lp := poolLoss(m, x, c, r, isMax)
					x[i] = old - h
					lm := poolLoss(m, x, c, r, isMax)
					x[i] = old
					require.InDelta(t, (lp-lm)/(2*h), dx[i], 1e-7, "element %d", i)
				}
			})
		}
	}
}

func TestPoolDeterministicAcrossGOMAXPROCS(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 24, Y: 24, Z: 24}
	rng := rand.New(rand.NewPCG(1, 2))
	coords := randomCoords(rng, ext, 0.3)
	const c = 13
	x := make([]float32, len(coords)/4*c)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	m, err := kmap.NewStrided(coords, ext, grid.Cube(3, 1, 1, 1), nil)
	require.NoError(t, err)
	dy := make([]float32, m.NOut*c)
	for i := range dy {
		dy[i] = float32(rng.NormFloat64())
	}
	run := func() [][]float32 {
		ymax, yavg := make([]float32, m.NOut*c), make([]float32, m.NOut*c)
		arg := make([]int32, m.NOut*c)
		MaxPool(m, x, c, ymax, arg)
		AvgPool(m, x, c, yavg)
		dmax, davg := make([]float32, len(x)), make([]float32, len(x))
		MaxPoolGrad(m, dy, arg, c, dmax)
		AvgPoolGrad(m, dy, nil, c, davg)
		return [][]float32{ymax, yavg, dmax, davg}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	want := run()
	for _, procs := range []int{2, 3, 8} {
		runtime.GOMAXPROCS(procs)
		got := run()
		for k := range want {
			require.True(t, slices.Equal(want[k], got[k]), "result %d differs with GOMAXPROCS=%d", k, procs)
		}
	}
}

func ExampleMaxPool() {
	// Two active voxels in one 2×2×2 window, pooled with kernel 2 stride 2.
	ext := grid.Extent{Batch: 1, X: 2, Y: 2, Z: 2}
	coords := []int32{0, 0, 0, 0, 0, 1, 1, 1}
	m, _ := kmap.NewStrided(coords, ext, grid.Cube(2, 2, 0, 1), nil)
	x := []float32{1, 5, 4, 2} // [2, 2]
	y := make([]float32, 2)
	arg := make([]int32, 2)
	MaxPool(m, x, 2, y, arg)
	avg := make([]float32, 2)
	AvgPool(m, x, 2, avg)
	fmt.Println(y, arg, avg)
	// Output: [4 5] [1 0] [2.5 3.5]
}

// BenchmarkPool pools FlexGEMM's RES = 128 sphere shell (64,160 voxels,
// C = 32, float32) with kernel 2, stride 2: forward and backward.
func BenchmarkPool(b *testing.B) {
	const res, c = 128, 32
	ext := grid.Extent{Batch: 1, X: res, Y: res, Z: res}
	coords := sphereShell(res)
	m, err := kmap.NewStrided(coords, ext, grid.Cube(2, 2, 0, 1), nil)
	if err != nil {
		b.Fatal(err)
	}
	m.Reverse() // built once per map, shared by every layer
	rng := rand.New(rand.NewPCG(1, 1))
	x := toT[float32](randomFeats(rng, m.NIn*c))
	dy := toT[float32](randomFeats(rng, m.NOut*c))
	y := make([]float32, m.NOut*c)
	arg := make([]int32, m.NOut*c)
	dx := make([]float32, m.NIn*c)
	b.Run("max", func(b *testing.B) {
		for b.Loop() {
			MaxPool(m, x, c, y, arg)
			MaxPoolGrad(m, dy, arg, c, dx)
		}
		b.ReportMetric(float64(m.NIn)*float64(b.N)/b.Elapsed().Seconds(), "voxels/s")
	})
	b.Run("avg", func(b *testing.B) {
		for b.Loop() {
			AvgPool(m, x, c, y)
			AvgPoolGrad(m, dy, nil, c, dx)
		}
		b.ReportMetric(float64(m.NIn)*float64(b.N)/b.Elapsed().Seconds(), "voxels/s")
	})
}
