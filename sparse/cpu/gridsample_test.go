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
)

// bruteSample is the float64 definition of FlexGEMM's grid sample, written
// directly from the formulas: nearest reads voxel trunc(q); trilinear blends
// the corners c = floor(q − 0.5) + {0,1}³ with w_c = Π (1 − |q − c − 0.5|),
// absent corners counting 0, divided by max(Σ w_c, 1e−12).
func bruteSample(d dense, points []float64, perBatch int, mode SampleMode, feats []float64, c int) []float64 {
	M := len(points) / 3
	out := make([]float64, M*c)
	for m := range M {
		b := m / perBatch
		q := points[3*m : 3*m+3]
		if mode == Nearest {
			r := d.at(b, int(math.Trunc(q[0])), int(math.Trunc(q[1])), int(math.Trunc(q[2])))
			// trunc maps (−1, 0) to 0, which is in bounds; anything ≤ −1
			// truncates to a negative index and is rejected by at.
			if r >= 0 {
				copy(out[m*c:m*c+c], feats[int(r)*c:int(r)*c+c])
			}
			continue
		}
		var base [3]float64
		for a := range 3 {
			base[a] = math.Floor(q[a] - 0.5)
		}
		sum := 0.0
		acc := make([]float64, c)
		for dx := 0.0; dx <= 1; dx++ {
			for dy := 0.0; dy <= 1; dy++ {
				for dz := 0.0; dz <= 1; dz++ {
					cn := [3]float64{base[0] + dx, base[1] + dy, base[2] + dz}
					r := d.at(b, int(cn[0]), int(cn[1]), int(cn[2]))
					if r < 0 {
						continue
					}
					w := 1.0
					for a := range 3 {
						w *= 1 - math.Abs(q[a]-cn[a]-0.5)
					}
					sum += w
					for j := range c {
						acc[j] += w * feats[int(r)*c+j]
					}
				}
			}
		}
		for j := range c {
			out[m*c+j] = acc[j] / math.Max(sum, 1e-12)
		}
	}
	return out
}

// randomPoints draws n query points in ext's spatial box widened by 2 on
// every side, each coordinate uniformly random, an integer (a voxel face),
// a half-integer (a voxel centre) or a small negative value.
func randomPoints(rng *rand.Rand, ext grid.Extent, n int) []float64 {
	dims := ext.Spatial()
	pts := make([]float64, 3*n)
	for i := range pts {
		lim := float64(dims[i%3])
		switch rng.IntN(5) {
		case 0, 1:
			pts[i] = -2 + (lim+4)*rng.Float64()
		case 2:
			pts[i] = float64(rng.IntN(dims[i%3]+3) - 1)
		case 3:
			pts[i] = float64(rng.IntN(dims[i%3]+2)-1) + 0.5
		case 4:
			pts[i] = -rng.Float64() * 1.2
		}
	}
	return pts
}

func randomFeats(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	return x
}

func TestGridSampleMatchesBruteForce(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 5, Y: 6, Z: 7}
	const perBatch = 300
	for _, mode := range []SampleMode{Nearest, Trilinear} {
		for _, c := range []int{1, 5} {
			t.Run(fmt.Sprintf("mode=%d/C%d", mode, c), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(c), uint64(mode)))
				coords := randomCoords(rng, ext, 0.5)
				d := densify(coords, ext)
				n := len(coords) / 4
				pts := randomPoints(rng, ext, 2*perBatch)
				feats := randomFeats(rng, n*c)
				want := bruteSample(d, pts, perBatch, mode, feats, c)
				p := NewSamplePlan(d, n, ext, pts, perBatch, mode)
				require.Equal(t, 2*perBatch, p.M)
				require.Len(t, p.Idx, p.M*mode.Corners())

				got64 := make([]float64, p.M*c)
				GridSample(p, feats, c, got64)
				got32 := make([]float32, p.M*c)
				GridSample(p, toT[float32](feats), c, got32)
				empty, full := 0, 0
				for j := range want {
					require.InDelta(t, want[j], got64[j], 1e-12, "float64 element %d", j)
					require.InDelta(t, want[j], float64(got32[j]), 1e-5*(1+math.Abs(want[j])), "float32 element %d", j)
				}
				// The plan's weights sum to 1 wherever a corner carries
				// weight, and to 0 elsewhere.
				K := mode.Corners()
				for m := range p.M {
					s := 0.0
					for k := range K {
						if p.Idx[m*K+k] < 0 {
							require.Zero(t, p.W[m*K+k])
						}
						s += p.W[m*K+k]
					}
					if s == 0 {
						empty++
					} else {
						full++
						require.InDelta(t, 1, s, 1e-12, "query %d", m)
					}
				}
				// The point mix must exercise both kinds of query.
				require.Greater(t, empty, 20)
				require.Greater(t, full, 100)
			})
		}
	}
}

func TestGridSampleBoundaryConventions(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 3, Y: 3, Z: 3}
	coords := []int32{0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 2, 2}
	d := densify(coords, ext)
	feats := []float64{10, 20, 30}
	cases := []struct {
		name  string
		mode  SampleMode
		q     [3]float64
		want  float64
		idx0  int32
		note  string
		tolWt float64
	}{
		{"nearest truncates -0.5 to 0", Nearest, [3]float64{-0.5, 0.2, 0.9}, 10, 0, "", 0},
		{"nearest at -1 is outside", Nearest, [3]float64{-1, 0, 0}, 0, -1, "", 0},
		{"nearest face belongs to upper voxel", Nearest, [3]float64{1, 0, 0}, 20, 1, "", 0},
		{"nearest past the far face", Nearest, [3]float64{3, 2.5, 2.5}, 0, -1, "", 0},
		{"trilinear at a centre", Trilinear, [3]float64{1.5, 0.5, 0.5}, 20, -1, "", 0},
		{"trilinear halfway", Trilinear, [3]float64{1, 0.5, 0.5}, 15, -1, "", 0},
		{"trilinear renormalises", Trilinear, [3]float64{0.75, 0.9, 0.5}, 0.75*10 + 0.25*20, -1, "", 0},
		{"trilinear lone corner outside", Trilinear, [3]float64{-0.25, -0.25, -0.25}, 10, -1, "", 0},
		{"trilinear far away", Trilinear, [3]float64{1e30, -1e30, 0}, 0, -1, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := NewSamplePlan(d, 3, ext, tc.q[:], 1, tc.mode)
			out := make([]float64, 1)
			GridSample(p, feats, 1, out)
			require.InDelta(t, tc.want, out[0], 1e-12)
			require.InDelta(t, tc.want, bruteSample(d, tc.q[:], 1, tc.mode, feats, 1)[0], 1e-12)
			if tc.mode == Nearest {
				require.Equal(t, tc.idx0, p.Idx[0])
			}
		})
	}
}

// pointLoss returns Σ r ⊙ bruteSample(points).
func pointLoss(d dense, pts []float64, perBatch int, mode SampleMode, feats []float64, c int, r []float64) float64 {
	s := 0.0
	for j, v := range bruteSample(d, pts, perBatch, mode, feats, c) {
		s += r[j] * v
	}
	return s
}

func TestGridSampleGradFiniteDifference(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 5, Y: 4, Z: 6}
	const perBatch, c = 60, 4
	for _, mode := range []SampleMode{Nearest, Trilinear} {
		t.Run(fmt.Sprintf("mode=%d", mode), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(mode)))
			coords := randomCoords(rng, ext, 0.55)
			d := densify(coords, ext)
			n := len(coords) / 4
			feats := randomFeats(rng, n*c)
			// Points away from kinks (trilinear: q − 0.5 more than 1e−3
			// from an integer; nearest: q itself) and from the
			// renormalisation floor.
			shift := 0.5
			if mode == Nearest {
				shift = 0
			}
			var pts []float64
			for len(pts) < 3*2*perBatch {
				q := randomPoints(rng, ext, 1)
				ok := true
				for a := range 3 {
					f := q[a] - shift - math.Floor(q[a]-shift)
					ok = ok && f > 1e-3 && f < 1-1e-3
				}
				ok = ok && (mode == Nearest || cornerWeightSum(d, len(pts)/3/perBatch, q) > 1e-2)
				if ok {
					pts = append(pts, q...)
				}
			}
			p := NewSamplePlan(d, n, ext, pts, perBatch, mode)
			r := randomFeats(rng, p.M*c)

			dFeats := make([]float64, n*c)
			GridSampleFeatGrad(p, r, c, dFeats)
			dFeats32 := make([]float32, n*c)
			GridSampleFeatGrad(p, toT[float32](r), c, dFeats32)
			const h = 1e-6
			for i := range feats {
				old := feats[i]
				feats[i] = old + h
				lp := pointLoss(d, pts, perBatch, mode, feats, c, r)
				feats[i] = old - h
				lm := pointLoss(d, pts, perBatch, mode, feats, c, r)
				feats[i] = old
				fd := (lp - lm) / (2 * h)
				require.InDelta(t, fd, dFeats[i], 1e-6, "dFeats %d", i)
				require.InDelta(t, fd, float64(dFeats32[i]), 1e-4*(1+math.Abs(fd)), "float32 dFeats %d", i)
			}

			dPts := make([]float64, 3*p.M)
			GridSamplePointGrad(p, feats, r, c, dPts)
			dPts32 := make([]float64, 3*p.M)
			GridSamplePointGrad(p, toT[float32](feats), toT[float32](r), c, dPts32)
			nonzero := 0
			for i := range pts {
				old := pts[i]
				pts[i] = old + h
				lp := pointLoss(d, pts, perBatch, mode, feats, c, r)
				pts[i] = old - h
				lm := pointLoss(d, pts, perBatch, mode, feats, c, r)
				pts[i] = old
				fd := (lp - lm) / (2 * h)
				require.InDelta(t, fd, dPts[i], 1e-5*(1+math.Abs(fd)), "dPoints %d", i)
				require.InDelta(t, fd, dPts32[i], 1e-4*(1+math.Abs(fd)), "float32 dPoints %d", i)
				if dPts[i] != 0 {
					nonzero++
				}
			}
			if mode == Nearest {
				require.Zero(t, nonzero)
			} else {
				require.Greater(t, nonzero, len(pts)/2)
			}
		})
	}
}

// cornerWeightSum returns Σ w_c over the present corners of query q.
func cornerWeightSum(d dense, b int, q []float64) float64 {
	s := 0.0
	for k := range 8 {
		w := 1.0
		var cn [3]int
		for a := range 3 {
			base := math.Floor(q[a] - 0.5)
			cn[a] = int(base) + cornerBit(k, a)
			w *= 1 - math.Abs(q[a]-float64(cn[a])-0.5)
		}
		if d.at(b, cn[0], cn[1], cn[2]) >= 0 {
			s += w
		}
	}
	return s
}

func TestGridSamplePointGradKinksAndFloor(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	coords := []int32{0, 1, 1, 1, 0, 2, 1, 1, 0, 1, 2, 1, 0, 2, 2, 2, 0, 0, 0, 0, 0, 3, 1, 0}
	d := densify(coords, ext)
	feats := []float64{1, -2, 3, 0.5, 7, 4}
	const h = 1e-7
	t.Run("kink gives the right-hand derivative", func(t *testing.T) {
		// q.x − 0.5 = 2 is a cell boundary; y and z are inside a cell.
		q := []float64{2.5, 1.8, 1.3}
		p := NewSamplePlan(d, 6, ext, q, 1, Trilinear)
		dq := make([]float64, 3)
		GridSamplePointGrad(p, feats, []float64{1}, 1, dq)
		l0 := pointLoss(d, q, 1, Trilinear, feats, 1, []float64{1})
		for a := range 3 {
			q[a] += h
			right := (pointLoss(d, q, 1, Trilinear, feats, 1, []float64{1}) - l0) / h
			q[a] -= h
			require.InDelta(t, right, dq[a], 1e-5, "axis %d", a)
		}
		require.NotZero(t, dq[0])
		// The left-hand derivative on x differs, so this is a real kink.
		q[0] -= h
		left := (l0 - pointLoss(d, q, 1, Trilinear, feats, 1, []float64{1})) / h
		require.Greater(t, math.Abs(left-dq[0]), 1e-2)
	})
	t.Run("floor gives zero", func(t *testing.T) {
		// q is the centre of the absent voxel (0,1,0): in its cell (base
		// (0,1,0), t = 0) only that voxel has positive weight, and the
		// present corners (1,1,1) and (1,2,1) have weight 0, so Σ w = 0.
		q := []float64{0.5, 1.5, 0.5}
		p := NewSamplePlan(d, 6, ext, q, 1, Trilinear)
		require.Equal(t, 0.0, cornerWeightSum(d, 0, q))
		out := make([]float64, 1)
		GridSample(p, feats, 1, out)
		require.Zero(t, out[0])
		dq := []float64{9, 9, 9}
		GridSamplePointGrad(p, feats, []float64{1}, 1, dq)
		require.Equal(t, []float64{0, 0, 0}, dq)
		// The present corners are in the plan at zero weight; moving q up
		// on x and z by any amount makes them the whole blend (a jump).
		require.Contains(t, p.Idx, int32(0))
		require.Contains(t, p.Idx, int32(2))
		require.Equal(t, make([]float64, 8), p.W)
	})
}

func TestGridSampleEmpty(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 2, Y: 2, Z: 2}
	for _, mode := range []SampleMode{Nearest, Trilinear} {
		// No points.
		p := NewSamplePlan(dense{ext: ext, row: []int32{0, -1, -1, -1, -1, -1, -1, -1}}, 1, ext, nil, 0, mode)
		require.Zero(t, p.M)
		GridSample(p, []float32{1, 2}, 2, []float32{})
		dF := []float32{5, 5}
		GridSampleFeatGrad(p, []float32{}, 2, dF)
		require.Equal(t, []float32{0, 0}, dF)
		GridSamplePointGrad(p, []float32{1, 2}, []float32{}, 2, []float64{})
		// No voxels.
		p = NewSamplePlan(densify(nil, ext), 0, ext, []float64{0.5, 0.5, 0.5}, 1, mode)
		out := []float64{3, 3}
		GridSample(p, []float64{}, 2, out)
		require.Equal(t, []float64{0, 0}, out)
		GridSampleFeatGrad(p, []float64{1, 1}, 2, []float64{})
	}
}

// sphereShell returns the coordinates of FlexGEMM's benchmark shell in
// batch 0: voxel (i, j, k) is active iff its centre is at distance
// d ∈ [res/2 − 1.25, res/2] from the grid centre. The comparison is exact:
// with u = 2i + 1 − res per axis, 16d² = 4Σu² ∈ [(2res − 5)², 4res²].
func sphereShell(res int) []int32 {
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

// spherePoints returns res×res query points on the sphere of radius
// res/2 − 0.5 around the grid centre, on a (θ, φ) parameter grid.
func spherePoints(res int) []float64 {
	c, r := float64(res)/2, float64(res)/2-0.5
	pts := make([]float64, 0, 3*res*res)
	for i := range res {
		th := math.Pi * (float64(i) + 0.5) / float64(res)
		for j := range res {
			ph := 2 * math.Pi * float64(j) / float64(res)
			pts = append(pts, c+r*math.Sin(th)*math.Cos(ph), c+r*math.Sin(th)*math.Sin(ph), c+r*math.Cos(th))
		}
	}
	return pts
}

func TestSphereShellCounts(t *testing.T) {
	// Voxel counts of FlexGEMM's tests/utils.py::sphere_coords (batch 1).
	for res, n := range map[int]int{8: 192, 16: 848, 32: 3840} {
		require.Equal(t, n, len(sphereShell(res))/4, "res %d", res)
	}
}

func TestGridSampleDeterministicAcrossGOMAXPROCS(t *testing.T) {
	const res, c = 32, 16
	ext := grid.Extent{Batch: 1, X: res, Y: res, Z: res}
	coords := sphereShell(res)
	d := densify(coords, ext)
	n := len(coords) / 4
	rng := rand.New(rand.NewPCG(5, 6))
	feats := toT[float32](randomFeats(rng, n*c))
	pts := spherePoints(res)
	dy := toT[float32](randomFeats(rng, len(pts)/3*c))
	run := func() ([]float32, []float32, []float64) {
		p := NewSamplePlan(d, n, ext, pts, len(pts)/3, Trilinear)
		out := make([]float32, p.M*c)
		GridSample(p, feats, c, out)
		dF := make([]float32, n*c)
		GridSampleFeatGrad(p, dy, c, dF)
		dP := make([]float64, 3*p.M)
		GridSamplePointGrad(p, feats, dy, c, dP)
		return out, dF, dP
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	o1, f1, p1 := run()
	for _, procs := range []int{2, 5, 8} {
		runtime.GOMAXPROCS(procs)
		o, f, p := run()
		require.True(t, slices.Equal(o1, o), "forward, GOMAXPROCS=%d", procs)
		require.True(t, slices.Equal(f1, f), "dFeats, GOMAXPROCS=%d", procs)
		require.True(t, slices.Equal(p1, p), "dPoints, GOMAXPROCS=%d", procs)
	}
}

func ExampleGridSample() {
	// Two voxels side by side on x; sample halfway between their centres
	// and at the centre of the first.
	ext := grid.Extent{Batch: 1, X: 2, Y: 1, Z: 1}
	coords := []int32{0, 0, 0, 0, 0, 1, 0, 0}
	idx := densify(coords, ext)
	points := []float64{1, 0.5, 0.5, 0.5, 0.5, 0.5}
	p := NewSamplePlan(idx, 2, ext, points, 2, Trilinear)
	out := make([]float64, 2)
	GridSample(p, []float64{2, 4}, 1, out)
	fmt.Println(out)
	// Output: [3 2]
}

func BenchmarkGridSampleSphere(b *testing.B) {
	const res, c = 128, 32
	ext := grid.Extent{Batch: 1, X: res, Y: res, Z: res}
	coords := sphereShell(res)
	d := densify(coords, ext)
	n := len(coords) / 4
	rng := rand.New(rand.NewPCG(1, 1))
	feats := toT[float32](randomFeats(rng, n*c))
	pts := spherePoints(res)
	M := len(pts) / 3
	dy := toT[float32](randomFeats(rng, M*c))
	out := make([]float32, M*c)
	dF := make([]float32, n*c)
	dP := make([]float64, 3*M)
	b.Run("trilinear/plan", func(b *testing.B) {
		for b.Loop() {
			NewSamplePlan(d, n, ext, pts, M, Trilinear)
		}
		b.ReportMetric(float64(M)*float64(b.N)/b.Elapsed().Seconds(), "queries/s")
	})
	b.Run("trilinear/fwd", func(b *testing.B) {
		p := NewSamplePlan(d, n, ext, pts, M, Trilinear)
		for b.Loop() {
			GridSample(p, feats, c, out)
		}
		b.ReportMetric(float64(M)*float64(b.N)/b.Elapsed().Seconds(), "queries/s")
	})
	b.Run("trilinear/fwd+bwd", func(b *testing.B) {
		// Everything a training step does per call: plan (neighbour map
		// and weights), forward, feature gradient (including the reverse
		// table) and point gradient.
		for b.Loop() {
			p := NewSamplePlan(d, n, ext, pts, M, Trilinear)
			GridSample(p, feats, c, out)
			GridSampleFeatGrad(p, dy, c, dF)
			GridSamplePointGrad(p, feats, dy, c, dP)
		}
		b.ReportMetric(float64(M)*float64(b.N)/b.Elapsed().Seconds(), "queries/s")
	})
}
