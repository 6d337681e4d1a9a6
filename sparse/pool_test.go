package sparse

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// poolTestCoords returns a random subset of ext's sites in (b, x, y, z)
// order.
func poolTestCoords(rng *rand.Rand, ext Extent, density float64) []int32 {
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

// densePoolRef is the brute-force definition of sparse pooling on a
// densified grid: for each output site of m (in m's order), the inputs of
// its window fine = o·S − P + k·D in tap order; max takes the first
// maximum, avg the mean. It returns float64 results and the argmax rows.
func densePoolRef(coords []int32, ext Extent, m *kmap.Map, x []float64, c int) (ymax, yavg []float64, amax []int32) {
	row := make(map[[4]int]int32)
	for r := 0; r < len(coords)/4; r++ {
		row[[4]int{int(coords[4*r]), int(coords[4*r+1]), int(coords[4*r+2]), int(coords[4*r+3])}] = int32(r)
	}
	conv := m.Conv
	for o := range m.NOut {
		oc := m.OutCoords[4*o : 4*o+4]
		var rows []int32
		for kx := range conv.Kernel[0] {
			for ky := range conv.Kernel[1] {
				for kz := range conv.Kernel[2] {
					k := [3]int{kx, ky, kz}
					s := [4]int{int(oc[0])}
					for a := range 3 {
						s[1+a] = int(oc[1+a])*conv.Stride[a] - conv.Padding[a] + k[a]*conv.Dilation[a]
					}
					if r, ok := row[s]; ok {
						rows = append(rows, r)
					}
				}
			}
		}
		for j := range c {
			best, arg, sum := math.Inf(-1), int32(-1), 0.0
			for _, r := range rows {
				v := x[int(r)*c+j]
				sum += v
				if v > best {
					best, arg = v, r
				}
			}
			if len(rows) == 0 {
				best, sum = 0, 0
			}
			ymax = append(ymax, best)
			amax = append(amax, arg)
			yavg = append(yavg, sum/math.Max(1, float64(len(rows))))
		}
	}
	return
}

func poolHostMatrix(dt DType, rows, cols int, x []float64) Matrix {
	if dt == Float32 {
		d := make([]float32, len(x))
		for i, v := range x {
			d[i] = float32(v)
		}
		return Matrix{Rows: rows, Cols: cols, Data: d}
	}
	return Matrix{Rows: rows, Cols: cols, Data: append([]float64(nil), x...)}
}

func TestPoolMatchesDenseDefinition(t *testing.T) {
	ext := Extent{Batch: 2, X: 7, Y: 6, Z: 5}
	for _, k := range []int{2, 3} {
		for s := 1; s <= 3; s++ {
			for _, c := range []int{1, 3, 13} {
				for _, dt := range []DType{Float32, Float64} {
					t.Run(fmt.Sprintf("k%d/s%d/C%d/%v", k, s, c, dt), func(t *testing.T) {
						rng := rand.New(rand.NewPCG(uint64(k*100+s*10+c), 1))
						coords := poolTestCoords(rng, ext, 0.4)
						m, err := kmap.NewStrided(coords, ext, grid.Cube(k, s, 0, 1), nil)
						require.NoError(t, err)
						x := make([]float64, m.NIn*c)
						for i := range x {
							x[i] = float64(rng.IntN(5)) / 4 // ties, exact in float32
						}
						ymax, yavg, amax := densePoolRef(coords, ext, m, x, c)

						y, arg, err := Pool(m, poolHostMatrix(dt, m.NIn, c, x), MaxPool)
						require.NoError(t, err)
						require.Equal(t, m.NOut, y.Rows)
						require.Equal(t, c, y.Cols)
						require.Equal(t, amax, arg.I32())
						got, err := y.Float64s()
						require.NoError(t, err)
						require.Equal(t, ymax, got)

						y, arg, err = Pool(m, poolHostMatrix(dt, m.NIn, c, x), AvgPool)
						require.NoError(t, err)
						require.True(t, arg.IsZero())
						got, err = y.Float64s()
						require.NoError(t, err)
						require.InDeltaSlice(t, yavg, got, 1e-6)
					})
				}
			}
		}
	}
}

func TestPoolGradFiniteDifferences(t *testing.T) {
	ext := Extent{Batch: 2, X: 5, Y: 5, Z: 4}
	for _, mode := range []PoolMode{AvgPool, MaxPool} {
		for _, geo := range []grid.Conv{grid.Cube(2, 2, 0, 1), grid.Cube(3, 1, 1, 1), grid.Cube(3, 2, 1, 1)} {
			t.Run(fmt.Sprintf("%v/%v", mode, geo), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(geo.Kernel[0]*10+geo.Stride[0]), uint64(mode)))
				coords := poolTestCoords(rng, ext, 0.5)
				m, err := kmap.NewStrided(coords, ext, geo, nil)
				require.NoError(t, err)
				const c = 3
				// Values 0.01 apart: no ties, and no change of the max
				// within ±h.
				x := make([]float64, m.NIn*c)
				for i, p := range rng.Perm(len(x)) {
					x[i] = 0.01 * float64(p)
				}
				r := make([]float64, m.NOut*c)
				for i := range r {
					r[i] = rng.NormFloat64()
				}
				loss := func() float64 {
					y, _, err := Pool(m, Matrix{Rows: m.NIn, Cols: c, Data: x}, mode)
					require.NoError(t, err)
					s := 0.0
					for i, v := range y.F64() {
						s += r[i] * v
					}
					return s
				}
				_, arg, err := Pool(m, Matrix{Rows: m.NIn, Cols: c, Data: x}, mode)
				require.NoError(t, err)
				dx, err := PoolGrad(m, Matrix{Rows: m.NOut, Cols: c, Data: r}, arg, mode)
				require.NoError(t, err)
				require.Equal(t, m.NIn, dx.Rows)
				const h = 1e-4
				for i := range x {
					old := x[i]
					x[i] = old + h
					lp := loss()
					x[i] = old - h
					lm := loss()
					x[i] = old
					require.InDelta(t, (lp-lm)/(2*h), dx.F64()[i], 1e-8, "element %d", i)
				}
			})
		}
	}
}

func TestPoolBadInput(t *testing.T) {
	ext := Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	coords := []int32{0, 0, 0, 0, 0, 1, 1, 1, 0, 3, 3, 3}
	m, err := kmap.NewStrided(coords, ext, grid.Cube(2, 2, 0, 1), nil)
	require.NoError(t, err)
	x := NewMatrix[float32](3, 2)
	dy := NewMatrix[float32](m.NOut, 2)
	_, arg, err := Pool(m, x, MaxPool)
	require.NoError(t, err)

	cases := []struct {
		name string
		run  func() error
		want error
	}{
		{"nil map", func() error { _, _, err := Pool(nil, x, MaxPool); return err }, ErrShape},
		{"bad mode", func() error { _, _, err := Pool(m, x, PoolMode(7)); return err }, ErrMode},
		{"wrong rows", func() error { _, _, err := Pool(m, NewMatrix[float32](2, 2), AvgPool); return err }, ErrShape},
		{"short data", func() error { _, _, err := Pool(m, Matrix{Rows: 3, Cols: 2, Data: []float32{1}}, AvgPool); return err }, ErrShape},
		{"int32 features", func() error { _, _, err := Pool(m, NewMatrix[int32](3, 2), MaxPool); return err }, ErrDType},
		{"unknown data", func() error {
			_, _, err := Pool(m, Matrix{Rows: 3, Cols: 2, Data: []int{1, 2, 3, 4, 5, 6}}, MaxPool)
			return err
		}, ErrDType},
		{"device data, no engine", func() error {
			_, _, err := Pool(m, Matrix{Rows: 3, Cols: 2, Data: unownedStorage{6}}, MaxPool)
			return err
		}, ErrNoEngine},
		{"grad bad mode", func() error { _, err := PoolGrad(m, dy, arg, PoolMode(-1)); return err }, ErrMode},
		{"grad wrong dy rows", func() error { _, err := PoolGrad(m, NewMatrix[float32](m.NOut+1, 2), arg, MaxPool); return err }, ErrShape},
		{"grad missing argmax", func() error { _, err := PoolGrad(m, dy, Matrix{}, MaxPool); return err }, ErrShape},
		{"grad argmax shape", func() error { _, err := PoolGrad(m, dy, NewMatrix[int32](m.NOut, 3), MaxPool); return err }, ErrShape},
		{"grad argmax dtype", func() error { _, err := PoolGrad(m, dy, NewMatrix[float32](m.NOut, 2), MaxPool); return err }, ErrDType},
		{"grad int32 dy", func() error { _, err := PoolGrad(m, NewMatrix[int32](m.NOut, 2), arg, AvgPool); return err }, ErrDType},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.run(), tc.want)
		})
	}
	// AvgPool ignores argmax.
	dx, err := PoolGrad(m, dy, NewMatrix[float32](1, 1), AvgPool)
	require.NoError(t, err)
	require.Equal(t, "[3, 2]", dx.Shape())
}

// unownedStorage is device data that no registered engine owns.
type unownedStorage struct{ n int }

func (f unownedStorage) DType() DType { return Float32 }
func (f unownedStorage) Len() int     { return f.n }

func TestPoolEmpty(t *testing.T) {
	ext := Extent{Batch: 2, X: 4, Y: 4, Z: 4}
	m, err := kmap.NewStrided(nil, ext, grid.Cube(2, 2, 0, 1), nil)
	require.NoError(t, err)
	for _, mode := range []PoolMode{MaxPool, AvgPool} {
		y, arg, err := Pool(m, NewMatrix[float64](0, 5), mode)
		require.NoError(t, err)
		require.Equal(t, "[0, 5]", y.Shape())
		dx, err := PoolGrad(m, NewMatrix[float64](0, 5), arg, mode)
		require.NoError(t, err)
		require.Equal(t, "[0, 5]", dx.Shape())
	}
}

func TestPoolDeterministic(t *testing.T) {
	ext := Extent{Batch: 2, X: 20, Y: 20, Z: 20}
	rng := rand.New(rand.NewPCG(3, 3))
	coords := poolTestCoords(rng, ext, 0.35)
	m, err := kmap.NewStrided(coords, ext, grid.Cube(3, 2, 1, 1), nil)
	require.NoError(t, err)
	const c = 13
	x := NewMatrix[float32](m.NIn, c)
	for i := range x.F32() {
		x.F32()[i] = float32(rng.NormFloat64())
	}
	dy := NewMatrix[float32](m.NOut, c)
	for i := range dy.F32() {
		dy.F32()[i] = float32(rng.NormFloat64())
	}
	run := func() []Matrix {
		var out []Matrix
		for _, mode := range []PoolMode{MaxPool, AvgPool} {
			y, arg, err := Pool(m, x, mode)
			require.NoError(t, err)
			dx, err := PoolGrad(m, dy, arg, mode)
			require.NoError(t, err)
			out = append(out, y, arg, dx)
		}
		return out
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	want := run()
	for _, procs := range []int{2, 4, 7} {
		runtime.GOMAXPROCS(procs)
		require.Equal(t, want, run(), "GOMAXPROCS=%d", procs)
	}
}

func ExamplePool() {
	// Three voxels of a 4³ grid, max- and average-pooled with kernel 2,
	// stride 2: the first two share the window of output site (0, 0, 0, 0).
	ext := Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	coords := []int32{
		0, 0, 0, 0,
		0, 1, 1, 1,
		0, 3, 2, 2,
	}
	m, _ := kmap.NewStrided(coords, ext, grid.Cube(2, 2, 0, 1), nil)
	x, _ := MatrixOf(3, 2, []float32{1, 6, 3, 2, 5, 5})
	y, argmax, _ := Pool(m, x, MaxPool)
	fmt.Println(m.OutCoords, y.F32(), argmax.I32())
	avg, _, _ := Pool(m, x, AvgPool)
	fmt.Println(avg.F32())
	dy, _ := MatrixOf(2, 2, []float32{1, 1, 1, 1})
	dx, _ := PoolGrad(m, dy, argmax, MaxPool)
	fmt.Println(dx.F32())
	// Output:
	// [0 0 0 0 0 1 1 1] [3 6 5 5] [1 0 2 2]
	// [2 4 5 5]
	// [0 1 1 0 1 1]
}
