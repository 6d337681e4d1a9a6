package sparse

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// sampleRef is the float64 definition of FlexGEMM's grid_sample_3d over a
// Go map from (b, x, y, z) to row: nearest reads voxel trunc(q) (toward
// zero); trilinear blends c = floor(q − 0.5) + {0,1}³ with
// w_c = Π (1 − |q − c − 0.5|) over present, in-bounds corners, divided by
// max(Σ w_c, 1e−12).
func sampleRef(coords []int32, ext Extent, pts []float64, perBatch int, mode SampleMode, feats []float64, c int) []float64 {
	row := make(map[[4]int]int, len(coords)/4)
	for r := 0; r < len(coords)/4; r++ {
		row[[4]int{int(coords[4*r]), int(coords[4*r+1]), int(coords[4*r+2]), int(coords[4*r+3])}] = r
	}
	find := func(b int, v [3]float64) (int, bool) {
		for a, d := range ext.Spatial() {
			if v[a] < 0 || v[a] >= float64(d) {
				return 0, false
			}
		}
		r, ok := row[[4]int{b, int(v[0]), int(v[1]), int(v[2])}]
		return r, ok
	}
	M := len(pts) / 3
	out := make([]float64, M*c)
	for m := range M {
		b := m / perBatch
		q := pts[3*m : 3*m+3]
		if mode == Nearest {
			if r, ok := find(b, [3]float64{math.Trunc(q[0]), math.Trunc(q[1]), math.Trunc(q[2])}); ok {
				copy(out[m*c:m*c+c], feats[r*c:r*c+c])
			}
			continue
		}
		sum := 0.0
		acc := make([]float64, c)
		for k := range 8 {
			var cn [3]float64
			w := 1.0
			for a := range 3 {
				cn[a] = math.Floor(q[a]-0.5) + float64(k>>a&1)
				w *= 1 - math.Abs(q[a]-cn[a]-0.5)
			}
			if r, ok := find(b, cn); ok {
				sum += w
				for j := range c {
					acc[j] += w * feats[r*c+j]
				}
			}
		}
		for j := range c {
			out[m*c+j] = acc[j] / math.Max(sum, 1e-12)
		}
	}
	return out
}

// sampleTestPoints draws points in ext's box widened by 2: uniform, on
// voxel faces (integers), at voxel centres, or slightly negative.
func sampleTestPoints(rng *rand.Rand, ext Extent, n int) []float64 {
	dims := ext.Spatial()
	pts := make([]float64, 3*n)
	for i := range pts {
		d := dims[i%3]
		switch rng.IntN(5) {
		case 0, 1:
			pts[i] = -2 + float64(d+4)*rng.Float64()
		case 2:
			pts[i] = float64(rng.IntN(d+3) - 1)
		case 3:
			pts[i] = float64(rng.IntN(d+2)-1) + 0.5
		default:
			pts[i] = -1.1 * rng.Float64()
		}
	}
	return pts
}

func sampleNormals(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	return x
}

func TestGridSampleMatchesDefinition(t *testing.T) {
	ext := Extent{Batch: 2, X: 6, Y: 5, Z: 7}
	const L = 250
	for _, mode := range []SampleMode{Nearest, Trilinear} {
		for _, dt := range []DType{Float32, Float64} {
			for _, c := range []int{1, 6} {
				t.Run(fmt.Sprintf("%v/%v/C%d", mode, dt, c), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(c), uint64(mode)))
					coords := poolTestCoords(rng, ext, 0.5)
					n := len(coords) / 4
					pts := sampleTestPoints(rng, ext, 2*L)
					if dt == Float32 {
						// Use the float32 values in the reference too.
						for i, v := range pts {
							pts[i] = float64(float32(v))
						}
					}
					feats := sampleNormals(rng, n*c)
					plan, err := NewSamplePlan(coords, ext, poolHostMatrix(dt, 2*L, 3, pts), L, mode)
					require.NoError(t, err)
					require.Equal(t, 2*L, plan.Queries())
					require.Equal(t, n, plan.Voxels())
					require.Equal(t, mode, plan.Mode())
					require.Equal(t, dt, plan.PointsDType())
					out, err := GridSample(plan, poolHostMatrix(dt, n, c, feats))
					require.NoError(t, err)
					require.Equal(t, fmt.Sprintf("[%d, %d]", 2*L, c), out.Shape())
					got, err := out.Float64s()
					require.NoError(t, err)
					want := sampleRef(coords, ext, pts, L, mode, feats, c)
					tol := 1e-12
					if dt == Float32 {
						tol = 1e-5
					}
					hits := 0
					for j := range want {
						require.InDelta(t, want[j], got[j], tol*(1+math.Abs(want[j])), "element %d", j)
						if j%c == 0 && want[j] != 0 {
							hits++
						}
					}
					// The point mix must exercise hits and misses alike.
					require.Greater(t, hits, L/5, "queries that hit the grid")
					require.Greater(t, 2*L-hits, L/5, "queries that miss it")
				})
			}
		}
	}
}

func TestGridSampleGradFiniteDifferences(t *testing.T) {
	ext := Extent{Batch: 2, X: 5, Y: 6, Z: 4}
	const L, c = 40, 3
	for _, mode := range []SampleMode{Nearest, Trilinear} {
		t.Run(mode.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(21, uint64(mode)))
			coords := poolTestCoords(rng, ext, 0.55)
			n := len(coords) / 4
			feats := sampleNormals(rng, n*c)
			// Points at least 1e−3 from every kink: integers for nearest,
			// half-integers for trilinear.
			shift := 0.5
			if mode == Nearest {
				shift = 0
			}
			var pts []float64
			for len(pts) < 3*2*L {
				q := sampleTestPoints(rng, ext, 1)
				ok := true
				for _, v := range q {
					f := v - shift - math.Floor(v-shift)
					ok = ok && f > 1e-3 && f < 1-1e-3
				}
				if ok {
					pts = append(pts, q...)
				}
			}
			r := sampleNormals(rng, 2*L*c)
			loss := func() float64 {
				s := 0.0
				for j, v := range sampleRef(coords, ext, pts, L, mode, feats, c) {
					s += r[j] * v
				}
				return s
			}
			plan, err := NewSamplePlan(coords, ext, poolHostMatrix(Float64, 2*L, 3, pts), L, mode)
			require.NoError(t, err)
			dF, dP, err := GridSampleGrad(plan, poolHostMatrix(Float64, n, c, feats), poolHostMatrix(Float64, 2*L, c, r))
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("[%d, %d]", n, c), dF.Shape())
			require.Equal(t, fmt.Sprintf("[%d, 3]", 2*L), dP.Shape())
			const h = 1e-6
			fd := func(x []float64, i int) float64 {
				old := x[i]
				x[i] = old + h
				lp := loss()
				x[i] = old - h
				lm := loss()
				x[i] = old
				return (lp - lm) / (2 * h)
			}
			for i := range feats {
				require.InDelta(t, fd(feats, i), dF.F64()[i], 1e-6, "dFeats %d", i)
			}
			nonzero := 0
			for i := range pts {
				want := fd(pts, i)
				// Queries near the renormalisation floor are steep; compare
				// relative to the derivative's size.
				require.InDelta(t, want, dP.F64()[i], 1e-5*(1+math.Abs(want)), "dPoints %d", i)
				if dP.F64()[i] != 0 {
					nonzero++
				}
			}
			if mode == Nearest {
				require.Zero(t, nonzero)
			} else {
				require.Greater(t, nonzero, len(pts)/6)
			}

			// float32 inputs give float32 gradients close to the float64 ones.
			plan32, err := NewSamplePlan(coords, ext, poolHostMatrix(Float32, 2*L, 3, pts), L, mode)
			require.NoError(t, err)
			dF32, dP32, err := GridSampleGrad(plan32, poolHostMatrix(Float32, n, c, feats), poolHostMatrix(Float32, 2*L, c, r))
			require.NoError(t, err)
			require.NotNil(t, dF32.F32())
			require.NotNil(t, dP32.F32())
			// Skip dFeats-only: feats may be omitted.
			dFOnly, dPNone, err := GridSampleGrad(plan, Matrix{}, poolHostMatrix(Float64, 2*L, c, r))
			require.NoError(t, err)
			require.True(t, dPNone.IsZero())
			require.Equal(t, dF.F64(), dFOnly.F64())
		})
	}
}

func TestGridSampleBadInput(t *testing.T) {
	ext := Extent{Batch: 2, X: 4, Y: 4, Z: 4}
	coords := []int32{0, 1, 1, 1, 1, 2, 2, 2}
	pts := NewMatrix[float32](4, 3) // 2 batches of 2
	plan, err := NewSamplePlan(coords, ext, pts, 2, Trilinear)
	require.NoError(t, err)
	feats := NewMatrix[float32](2, 5)
	withNaN := NewMatrix[float64](4, 3)
	withNaN.F64()[7] = math.NaN()
	withInf := NewMatrix[float32](4, 3)
	withInf.F32()[2] = float32(math.Inf(-1))

	plans := []struct {
		name     string
		coords   []int32
		ext      Extent
		pts      Matrix
		perBatch int
		mode     SampleMode
		want     error
	}{
		{"NaN point", coords, ext, withNaN, 2, Trilinear, ErrNotFinite},
		{"Inf point", coords, ext, withInf, 2, Nearest, ErrNotFinite},
		{"batch mismatch", coords, ext, NewMatrix[float32](6, 3), 2, Trilinear, ErrShape},
		{"ragged batches", coords, ext, NewMatrix[float32](5, 3), 2, Trilinear, ErrShape},
		{"zero per batch", coords, ext, pts, 0, Trilinear, ErrShape},
		{"negative per batch", coords, ext, pts, -2, Trilinear, ErrShape},
		{"points not [M, 3]", coords, ext, NewMatrix[float32](4, 2), 2, Trilinear, ErrShape},
		{"int32 points", coords, ext, NewMatrix[int32](4, 3), 2, Trilinear, ErrDType},
		{"bad mode", coords, ext, pts, 2, SampleMode(3), ErrMode},
		{"coords not [N, 4]", coords[:7], ext, pts, 2, Trilinear, ErrShape},
		{"coord outside", []int32{0, 4, 0, 0}, ext, pts, 2, Trilinear, ErrOutOfRange},
		{"negative batch", []int32{-1, 0, 0, 0}, ext, pts, 2, Trilinear, ErrOutOfRange},
		{"duplicate", []int32{0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1}, ext, pts, 2, Trilinear, ErrDuplicate},
		{"bad extent", coords, Extent{Batch: 2, X: 0, Y: 4, Z: 4}, pts, 2, Trilinear, nil},
	}
	for _, tc := range plans {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewSamplePlan(tc.coords, tc.ext, tc.pts, tc.perBatch, tc.mode)
			require.Error(t, err)
			require.Nil(t, p)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
			}
		})
	}

	dy := NewMatrix[float32](4, 5)
	calls := []struct {
		name string
		run  func() error
		want error
	}{
		{"nil plan", func() error { _, err := GridSample(nil, feats); return err }, ErrShape},
		{"feats rows", func() error { _, err := GridSample(plan, NewMatrix[float32](3, 5)); return err }, ErrShape},
		{"int32 feats", func() error { _, err := GridSample(plan, NewMatrix[int32](2, 5)); return err }, ErrDType},
		{"device feats, no engine", func() error {
			_, err := GridSample(plan, Matrix{Rows: 2, Cols: 5, Data: unownedStorage{10}})
			return err
		}, ErrNoEngine},
		{"device points", func() error {
			_, err := NewSamplePlan(coords, ext, Matrix{Rows: 4, Cols: 3, Data: unownedStorage{12}}, 2, Trilinear)
			return err
		}, ErrDType},
		{"grad nil plan", func() error { _, _, err := GridSampleGrad(nil, feats, dy); return err }, ErrShape},
		{"grad dy rows", func() error { _, _, err := GridSampleGrad(plan, feats, NewMatrix[float32](3, 5)); return err }, ErrShape},
		{"grad feats cols", func() error { _, _, err := GridSampleGrad(plan, NewMatrix[float32](2, 4), dy); return err }, ErrShape},
		{"grad mixed dtype", func() error { _, _, err := GridSampleGrad(plan, NewMatrix[float64](2, 5), dy); return err }, ErrDType},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.run(), tc.want)
		})
	}
}

func TestGridSampleEmpty(t *testing.T) {
	ext := Extent{Batch: 1, X: 3, Y: 3, Z: 3}
	for _, mode := range []SampleMode{Nearest, Trilinear} {
		t.Run(mode.String(), func(t *testing.T) {
			// M = 0.
			plan, err := NewSamplePlan([]int32{0, 1, 1, 1}, ext, NewMatrix[float32](0, 3), 0, mode)
			require.NoError(t, err)
			out, err := GridSample(plan, NewMatrix[float32](1, 4))
			require.NoError(t, err)
			require.Equal(t, "[0, 4]", out.Shape())
			dF, dP, err := GridSampleGrad(plan, NewMatrix[float32](1, 4), NewMatrix[float32](0, 4))
			require.NoError(t, err)
			require.Equal(t, []float32{0, 0, 0, 0}, dF.F32())
			require.Equal(t, "[0, 3]", dP.Shape())
			// N = 0: every query misses.
			pts, _ := MatrixOf(2, 3, []float64{1.2, 1.5, 0.7, -3, 4, 1})
			plan, err = NewSamplePlan(nil, ext, pts, 2, mode)
			require.NoError(t, err)
			out, err = GridSample(plan, NewMatrix[float64](0, 2))
			require.NoError(t, err)
			require.Equal(t, []float64{0, 0, 0, 0}, out.F64())
			dF, dP, err = GridSampleGrad(plan, NewMatrix[float64](0, 2), NewMatrix[float64](2, 2))
			require.NoError(t, err)
			require.Equal(t, "[0, 2]", dF.Shape())
			require.Equal(t, []float64{0, 0, 0, 0, 0, 0}, dP.F64())
		})
	}
}

// shellCoords is FlexGEMM's benchmark sphere shell (tests/utils.py
// sphere_coords) in batch 0: voxel (i, j, k) is active iff its centre is at
// distance d ∈ [res/2 − 1.25, res/2] from the grid centre, compared exactly
// as 16d² ∈ [(2res − 5)², 4res²].
func shellCoords(res int) []int32 {
	lo, hi := (2*res-5)*(2*res-5), 4*res*res
	var coords []int32
	for i := range res {
		for j := range res {
			for k := range res {
				u, v, w := 2*i+1-res, 2*j+1-res, 2*k+1-res
				if s := 4 * (u*u + v*v + w*w); s >= lo && s <= hi {
					coords = append(coords, 0, int32(i), int32(j), int32(k))
				}
			}
		}
	}
	return coords
}

// shellPoints returns res×res points on the sphere of radius res/2 − 0.5
// about the grid centre, on a (θ, φ) grid, as float32 [res², 3].
func shellPoints(res int) Matrix {
	c, r := float64(res)/2, float64(res)/2-0.5
	pts := NewMatrix[float32](res*res, 3)
	d := pts.F32()
	for i := range res {
		th := math.Pi * (float64(i) + 0.5) / float64(res)
		for j := range res {
			ph := 2 * math.Pi * float64(j) / float64(res)
			m := i*res + j
			d[3*m] = float32(c + r*math.Sin(th)*math.Cos(ph))
			d[3*m+1] = float32(c + r*math.Sin(th)*math.Sin(ph))
			d[3*m+2] = float32(c + r*math.Cos(th))
		}
	}
	return pts
}

func TestGridSampleDeterministic(t *testing.T) {
	const res, c = 40, 8
	ext := Extent{Batch: 1, X: res, Y: res, Z: res}
	coords := shellCoords(res)
	rng := rand.New(rand.NewPCG(8, 8))
	feats := poolHostMatrix(Float32, len(coords)/4, c, sampleNormals(rng, len(coords)/4*c))
	pts := shellPoints(res)
	dy := poolHostMatrix(Float32, pts.Rows, c, sampleNormals(rng, pts.Rows*c))
	run := func() []Matrix {
		plan, err := NewSamplePlan(coords, ext, pts, pts.Rows, Trilinear)
		require.NoError(t, err)
		out, err := GridSample(plan, feats)
		require.NoError(t, err)
		dF, dP, err := GridSampleGrad(plan, feats, dy)
		require.NoError(t, err)
		return []Matrix{out, dF, dP}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	want := run()
	for _, procs := range []int{2, 3, 8} {
		runtime.GOMAXPROCS(procs)
		require.Equal(t, want, run(), "GOMAXPROCS=%d", procs)
	}
}

func ExampleGridSample() {
	// Two voxels side by side on x, with one feature each. Query 0 is
	// halfway between their centres, query 1 at the centre of voxel 0,
	// query 2 next to the missing voxel (0, 1, 0): trilinear weights are
	// renormalised over the voxels that exist.
	ext := Extent{Batch: 1, X: 2, Y: 2, Z: 1}
	coords := []int32{0, 0, 0, 0, 0, 1, 0, 0}
	points, _ := MatrixOf(3, 3, []float32{
		1, 0.5, 0.5,
		0.5, 0.5, 0.5,
		0.5, 1, 0.5,
	})
	plan, _ := NewSamplePlan(coords, ext, points, 3, Trilinear)
	feats, _ := MatrixOf(2, 1, []float32{2, 4})
	out, _ := GridSample(plan, feats)
	fmt.Println(out.F32())

	nearest, _ := NewSamplePlan(coords, ext, points, 3, Nearest)
	out, _ = GridSample(nearest, feats)
	fmt.Println(out.F32())
	// Output:
	// [3 2 2]
	// [4 2 0]
}

func ExampleGridSampleGrad() {
	// One query a quarter of the way from voxel 0's centre to voxel 1's:
	// out = 0.75·f0 + 0.25·f1, so dFeats = (0.75, 0.25)·dy and
	// dPoints.x = (f1 − f0)·dy.
	ext := Extent{Batch: 1, X: 2, Y: 1, Z: 1}
	coords := []int32{0, 0, 0, 0, 0, 1, 0, 0}
	points, _ := MatrixOf(1, 3, []float64{0.75, 0.5, 0.5})
	plan, _ := NewSamplePlan(coords, ext, points, 1, Trilinear)
	feats, _ := MatrixOf(2, 1, []float64{2, 4})
	dy, _ := MatrixOf(1, 1, []float64{1})
	dFeats, dPoints, _ := GridSampleGrad(plan, feats, dy)
	fmt.Println(dFeats.F64(), dPoints.F64())
	// Output: [0.75 0.25] [2 0 0]
}

// BenchmarkGridSampleTrilinear samples FlexGEMM's RES = 128 sphere shell
// (64,160 voxels, C = 32, float32) at 128×128 points on the sphere of radius
// 63.5: "fwd" is plan + forward, "fwd+bwd" adds both gradients.
func BenchmarkGridSampleTrilinear(b *testing.B) {
	const res, c = 128, 32
	ext := Extent{Batch: 1, X: res, Y: res, Z: res}
	coords := shellCoords(res)
	n := len(coords) / 4
	rng := rand.New(rand.NewPCG(1, 2))
	feats := poolHostMatrix(Float32, n, c, sampleNormals(rng, n*c))
	pts := shellPoints(res)
	dy := poolHostMatrix(Float32, pts.Rows, c, sampleNormals(rng, pts.Rows*c))
	for _, bwd := range []bool{false, true} {
		name := "fwd"
		if bwd {
			name = "fwd+bwd"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				plan, err := NewSamplePlan(coords, ext, pts, pts.Rows, Trilinear)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := GridSample(plan, feats); err != nil {
					b.Fatal(err)
				}
				if bwd {
					if _, _, err := GridSampleGrad(plan, feats, dy); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(pts.Rows)*float64(b.N)/b.Elapsed().Seconds(), "queries/s")
		})
	}
}
