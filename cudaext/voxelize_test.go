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
)

// TestGPUVoxelize compares Voxelize with sparse.Voxelize: voxels, order,
// point index and counts exactly, mean features within 1e-6 (both sum in
// float64 in point order, so they agree to the last bit in practice).
func TestGPUVoxelize(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(31, 32))
	type tc struct {
		name   string
		p, c   int
		batch  int
		opt    sparse.VoxelizeOptions
		spread float64
	}
	cases := []tc{
		{name: "empty", p: 0, c: 3, opt: sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}}},
		{name: "one", p: 1, c: 2, spread: 3, opt: sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}}},
		{name: "derived", p: 5000, c: 4, spread: 10, opt: sparse.VoxelizeOptions{VoxelSize: [3]float64{0.5, 0.25, 1}}},
		{name: "batched", p: 20000, c: 3, batch: 3, spread: 30, opt: sparse.VoxelizeOptions{VoxelSize: [3]float64{0.7, 0.7, 0.7}, Origin: [3]float64{-1, 2, 0.5}, DropOutside: true}},
		{name: "given-drop", p: 20000, c: 1, batch: 2, spread: 30, opt: sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Origin: [3]float64{-5, -5, -5}, Extent: grid.Extent{Batch: 2, X: 20, Y: 25, Z: 30}, DropOutside: true}},
		{name: "all-dropped", p: 100, c: 2, spread: 5, opt: sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Origin: [3]float64{100, 0, 0}, DropOutside: true}},
		{name: "no-feats", p: 3000, c: 0, spread: 8, opt: sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pts := make([]float32, 3*c.p)
			for i := range pts {
				pts[i] = float32(rng.Float64() * c.spread)
			}
			feats := make([]float32, c.p*c.c)
			for i := range feats {
				feats[i] = float32(rng.NormFloat64())
			}
			opt := c.opt
			if c.batch > 0 {
				opt.Batch = make([]int32, c.p)
				for i := range opt.Batch {
					opt.Batch[i] = int32(rng.IntN(c.batch))
				}
			}
			hf := sparse.Matrix{}
			if c.c > 0 {
				hf = sparse.Matrix{Rows: c.p, Cols: c.c, Data: feats}
			}
			want, err := sparse.Voxelize(pts, hf, opt)
			require.NoError(t, err)
			dp, err := e.ToDevice(sparse.Matrix{Rows: c.p, Cols: 3, Data: pts})
			require.NoError(t, err)
			df := sparse.Matrix{}
			if c.c > 0 {
				df, err = e.ToDevice(hf)
				require.NoError(t, err)
			}
			// Batch indices once from the options (host) and once on the device.
			for _, devBatch := range []bool{false, true} {
				o := opt
				batch := sparse.Matrix{}
				if devBatch && opt.Batch != nil {
					batch = gxDeviceI32(t, e, opt.Batch)
					o.Batch = nil
				}
				got, err := e.Voxelize(dp, df, batch, o)
				require.NoError(t, err)
				require.Equal(t, want.Extent, got.Extent)
				require.Equal(t, want.Coords, gxI32(t, e, got.Coords))
				require.Equal(t, want.Index, gxI32(t, e, got.Index))
				require.Equal(t, want.Counts, gxI32(t, e, got.Counts))
				if c.c == 0 {
					require.True(t, got.Feats.IsZero())
				} else {
					wf := want.Feats.F32()
					gf := gxF32(t, e, got.Feats)
					require.Len(t, gf, len(wf))
					require.LessOrEqual(t, gxRelL2(gf, wf), 1e-6)
				}
				got.Free()
			}
		})
	}
}

// gxDeviceI32 uploads an int32 column.
func gxDeviceI32(t testing.TB, e *Engine, v []int32) sparse.Matrix {
	t.Helper()
	m, err := e.ToDevice(sparse.Matrix{Rows: len(v), Cols: 1, Data: v})
	require.NoError(t, err)
	return m
}

// TestGPUVoxelizeErrors checks that bad points are reported like
// sparse.Voxelize reports them (the first bad point, same reason).
func TestGPUVoxelizeErrors(t *testing.T) {
	e := gxEngine(t)
	base := func() []float32 { return []float32{0.5, 0.5, 0.5, 1.5, 2.5, 3.5, 2, 2, 2, 3, 3, 3} }
	nan := float32(math.NaN())
	cases := []struct {
		name  string
		pts   []float32
		batch []int32
		opt   sparse.VoxelizeOptions
	}{
		{"nan", func() []float32 { p := base(); p[7] = nan; p[10] = nan; return p }(), nil, sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}}},
		{"inf", func() []float32 { p := base(); p[3] = float32(math.Inf(-1)); return p }(), nil, sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}}},
		{"negative-voxel", func() []float32 { p := base(); p[5] = -0.25; return p }(), nil, sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}}},
		{"outside-given", base(), nil, sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}, Extent: grid.Extent{Batch: 1, X: 3, Y: 3, Z: 3}}},
		{"negative-batch", base(), []int32{0, 0, -1, 0}, sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opt := c.opt
			opt.Batch = c.batch
			_, werr := sparse.Voxelize(c.pts, sparse.Matrix{}, opt)
			require.ErrorIs(t, werr, sparse.ErrOutOfRange)
			dp, err := e.ToDevice(sparse.Matrix{Rows: len(c.pts) / 3, Cols: 3, Data: c.pts})
			require.NoError(t, err)
			_, gerr := e.Voxelize(dp, sparse.Matrix{}, sparse.Matrix{}, opt)
			require.ErrorIs(t, gerr, sparse.ErrOutOfRange)
			// Same reason text after the operation name.
			_, wmsg, _ := cutAfter(werr.Error(), "Voxelize: ")
			_, gmsg, _ := cutAfter(gerr.Error(), "Voxelize: ")
			require.Equal(t, wmsg, gmsg, fmt.Sprintf("cpu %q\ngpu %q", werr, gerr))
		})
	}
	dp, err := e.ToDevice(sparse.Matrix{Rows: 1, Cols: 3, Data: []float32{1, 1, 1}})
	require.NoError(t, err)
	_, err = e.Voxelize(dp, sparse.Matrix{}, sparse.Matrix{}, sparse.VoxelizeOptions{VoxelSize: [3]float64{0, 1, 1}})
	require.ErrorIs(t, err, sparse.ErrOutOfRange)
	_, err = e.Voxelize(dp, sparse.Matrix{}, gxDeviceI32(t, e, []int32{0, 0}), sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}})
	require.ErrorIs(t, err, sparse.ErrShape)
	f, err := e.ToDevice(sparse.Matrix{Rows: 2, Cols: 1, Data: []float32{1, 2}})
	require.NoError(t, err)
	_, err = e.Voxelize(dp, f, sparse.Matrix{}, sparse.VoxelizeOptions{VoxelSize: [3]float64{1, 1, 1}})
	require.ErrorIs(t, err, sparse.ErrShape)
}

func cutAfter(s, sep string) (string, string, bool) {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}
