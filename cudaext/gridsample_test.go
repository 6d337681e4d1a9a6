//go:build cudaext

package cudaext

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// gxQueries returns M = B·L query points around and inside ext: random
// positions (some outside), cell centres and cell boundaries (kinks).
func gxQueries(rng *rand.Rand, ext grid.Extent, L int) []float32 {
	M := ext.Batch * L
	q := make([]float32, 3*M)
	dims := [3]int{ext.X, ext.Y, ext.Z}
	for m := range M {
		for a := range 3 {
			d := float64(dims[a])
			var v float64
			switch rng.IntN(5) {
			case 0:
				v = float64(rng.IntN(dims[a])) + 0.5 // a voxel centre (a cell boundary of the blend)
			case 1:
				v = float64(rng.IntN(dims[a] + 1)) // a voxel face
			case 2:
				v = rng.Float64()*(d+4) - 2 // possibly outside
			default:
				v = rng.Float64() * d
			}
			q[3*m+a] = float32(v)
		}
	}
	return q
}

// TestGPUGridSample compares device plans with host plans bit for bit, and
// the forward, feature gradient and point gradient with the CPU
// (relative L2 ≤ 1e-5), for device-built plans and for host plans routed
// through sparse.GridSample.
func TestGPUGridSample(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(51, 52))
	shell, sext := synth.SphereShell(24, 2)
	rext := grid.Extent{Batch: 3, X: 11, Y: 9, Z: 14}
	random := gxShuffled(rng, synth.RandomScene(rng, rext, 0.3))
	scenes := []struct {
		name   string
		coords []int32
		ext    grid.Extent
		L      int
	}{
		{"shell", shell, sext, 3000},
		{"random", random, rext, 2000},
		{"no-voxels", nil, rext, 50},
		{"no-queries", random, rext, 0},
	}
	for _, sc := range scenes {
		for _, mode := range []sparse.SampleMode{sparse.Trilinear, sparse.Nearest} {
			for _, C := range []int{1, 5, 16} {
				t.Run(fmt.Sprintf("%s/%v/C%d", sc.name, mode, C), func(t *testing.T) {
					pts := gxQueries(rng, sc.ext, sc.L)
					M := len(pts) / 3
					N := len(sc.coords) / 4
					hpts := sparse.Matrix{Rows: M, Cols: 3, Data: pts}
					hp, err := sparse.NewSamplePlan(sc.coords, sc.ext, hpts, sc.L, mode)
					require.NoError(t, err)
					dpts, err := e.ToDevice(hpts)
					require.NoError(t, err)
					dp, err := e.NewSamplePlan(gxCoords(t, e, sc.coords), sc.ext, dpts, sc.L, mode)
					require.NoError(t, err)
					defer dp.Free()
					require.Equal(t, M, dp.Queries())
					require.Equal(t, N, dp.Voxels())
					require.Equal(t, hp.Corners(), dp.Corners())
					idx, w, err := dp.Host()
					require.NoError(t, err)
					require.Equal(t, hp.Indices(), idx)
					require.Equal(t, hp.Weights(), w)

					feats := synth.Uniform[float32](rng, N*C)
					dy := synth.Uniform[float32](rng, M*C)
					hf := sparse.Matrix{Rows: N, Cols: C, Data: feats}
					hdy := sparse.Matrix{Rows: M, Cols: C, Data: dy}
					wout, err := sparse.GridSample(hp, hf)
					require.NoError(t, err)
					wdf, wdp, err := sparse.GridSampleGrad(hp, hf, hdy)
					require.NoError(t, err)
					df, err := e.ToDevice(hf)
					require.NoError(t, err)
					ddy, err := e.ToDevice(hdy)
					require.NoError(t, err)

					check := func(out, gdf, gdp sparse.Matrix) {
						require.LessOrEqual(t, gxRelL2(gxF32(t, e, out), wout.F32()), 1e-5)
						require.LessOrEqual(t, gxRelL2(gxF32(t, e, gdf), wdf.F32()), 1e-5)
						require.Equal(t, M, gdp.Rows)
						require.Equal(t, 3, gdp.Cols)
						require.LessOrEqual(t, gxRelL2(gxF32(t, e, gdp), wdp.F32()), 1e-5)
					}
					// Device plan.
					out, err := dp.Sample(df)
					require.NoError(t, err)
					gdf, gdp, err := dp.Grad(df, ddy)
					require.NoError(t, err)
					check(out, gdf, gdp)
					// Feature gradient only.
					gdf2, none, err := dp.Grad(sparse.Matrix{}, ddy)
					require.NoError(t, err)
					require.True(t, none.IsZero())
					require.Equal(t, gxF32(t, e, gdf), gxF32(t, e, gdf2))
					// Host plan through the package API.
					out, err = sparse.GridSample(hp, df)
					require.NoError(t, err)
					gdf, gdp, err = sparse.GridSampleGrad(hp, df, ddy)
					require.NoError(t, err)
					check(out, gdf, gdp)
					// Half precision runs (loose bound).
					fh, err := e.ToDeviceAs(hf, sparse.BFloat16)
					require.NoError(t, err)
					oh, err := dp.Sample(fh)
					require.NoError(t, err)
					require.LessOrEqual(t, gxRelL2(gxF32(t, e, oh), wout.F32()), 1e-2)
				})
			}
		}
	}
}

// TestGPUGridSampleFloat64Points checks host plans built from float64
// points: the device keeps them in float64 for the point gradient.
func TestGPUGridSampleFloat64Points(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(53, 54))
	c, ext := synth.SphereShell(16, 1)
	L := 500
	p32 := gxQueries(rng, ext, L)
	p64 := make([]float64, len(p32))
	for i, v := range p32 {
		p64[i] = float64(v) + rng.Float64()*1e-3
	}
	hp, err := sparse.NewSamplePlan(c, ext, sparse.Matrix{Rows: L, Cols: 3, Data: p64}, L, sparse.Trilinear)
	require.NoError(t, err)
	N, C := len(c)/4, 4
	feats := synth.Uniform[float32](rng, N*C)
	dy := synth.Uniform[float32](rng, L*C)
	hf := sparse.Matrix{Rows: N, Cols: C, Data: feats}
	hdy := sparse.Matrix{Rows: L, Cols: C, Data: dy}
	_, wdp, err := sparse.GridSampleGrad(hp, hf, hdy)
	require.NoError(t, err)
	df, err := e.ToDevice(hf)
	require.NoError(t, err)
	ddy, err := e.ToDevice(hdy)
	require.NoError(t, err)
	_, gdp, err := sparse.GridSampleGrad(hp, df, ddy)
	require.NoError(t, err)
	want := make([]float32, len(wdp.F64()))
	for i, v := range wdp.F64() {
		want[i] = float32(v)
	}
	require.LessOrEqual(t, gxRelL2(gxF32(t, e, gdp), want), 1e-5)
	// A device plan from float64 host points equals the host plan.
	dp, err := e.NewSamplePlan(sparse.Matrix{Rows: N, Cols: 4, Data: c}, ext, sparse.Matrix{Rows: L, Cols: 3, Data: p64}, L, sparse.Trilinear)
	require.NoError(t, err)
	idx, w, err := dp.Host()
	require.NoError(t, err)
	require.Equal(t, hp.Indices(), idx)
	require.Equal(t, hp.Weights(), w)
}

// TestGPUGridSampleErrors checks NewSamplePlan's validation.
func TestGPUGridSampleErrors(t *testing.T) {
	e := gxEngine(t)
	ext := grid.Extent{Batch: 2, X: 4, Y: 4, Z: 4}
	coords := []int32{0, 1, 1, 1, 1, 2, 2, 2}
	pts := []float32{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}
	dp := func(p []float32) sparse.Matrix {
		m, err := e.ToDevice(sparse.Matrix{Rows: len(p) / 3, Cols: 3, Data: p})
		require.NoError(t, err)
		return m
	}
	_, err := e.NewSamplePlan(gxCoords(t, e, coords), ext, dp(pts), 2, sparse.Trilinear)
	require.NoError(t, err)
	bad := append([]float32(nil), pts...)
	bad[7] = float32(math.Inf(1))
	_, err = e.NewSamplePlan(gxCoords(t, e, coords), ext, dp(bad), 2, sparse.Trilinear)
	require.ErrorIs(t, err, sparse.ErrNotFinite)
	require.ErrorContains(t, err, "point 2 has coordinate y = +Inf")
	_, err = e.NewSamplePlan(gxCoords(t, e, coords), ext, dp(pts), 1, sparse.Trilinear)
	require.ErrorIs(t, err, sparse.ErrShape)
	_, err = e.NewSamplePlan(gxCoords(t, e, []int32{0, 1, 1, 1, 0, 1, 1, 1}), ext, dp(pts), 2, sparse.Nearest)
	require.ErrorIs(t, err, sparse.ErrDuplicate)
	require.ErrorContains(t, err, "rows 0 and 1")
	_, err = e.NewSamplePlan(gxCoords(t, e, []int32{0, 4, 1, 1}), ext, dp(pts), 2, sparse.Nearest)
	require.ErrorIs(t, err, sparse.ErrOutOfRange)
	_, err = e.NewSamplePlan(gxCoords(t, e, coords), ext, dp(pts), 2, sparse.SampleMode(9))
	require.ErrorIs(t, err, sparse.ErrMode)
	p, err := e.NewSamplePlan(gxCoords(t, e, coords), ext, dp(pts), 2, sparse.Nearest)
	require.NoError(t, err)
	f, err := e.Alloc(sparse.Float32, 3, 2)
	require.NoError(t, err)
	_, err = p.Sample(f)
	require.ErrorIs(t, err, sparse.ErrShape)
	p.Free()
	_, err = p.Sample(f)
	require.ErrorIs(t, err, ErrFreed)
}
