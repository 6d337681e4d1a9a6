//go:build cudaext

package cudaext

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/cpu"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// TestGPUPool compares max/avg pooling and their gradients with package
// cpu on maps built on the GPU and on the host: max pooling and argmax
// exactly (ties, NaN, empty outputs included), average pooling and the
// gradients within 1e-6 (float32, same order of additions).
func TestGPUPool(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(41, 42))
	shell, sext := synth.SphereShell(32, 2)
	rext := grid.Extent{Batch: 2, X: 20, Y: 17, Z: 13}
	random := gxShuffled(rng, synth.RandomScene(rng, rext, 0.2))
	type mc struct {
		name string
		m    *kmap.Map
	}
	var maps []mc
	for _, s := range []struct {
		name   string
		coords []int32
		ext    grid.Extent
	}{{"shell", shell, sext}, {"random", random, rext}} {
		for _, conv := range []grid.Conv{grid.Cube(2, 2, 0, 1), grid.Cube(3, 2, 1, 1)} {
			g, err := e.StridedMap(gxCoords(t, e, s.coords), s.ext, conv, sparse.Matrix{})
			require.NoError(t, err)
			maps = append(maps, mc{fmt.Sprintf("%s/%v/gpu", s.name, conv), g})
			h, err := kmap.NewStrided(s.coords, s.ext, conv, nil)
			require.NoError(t, err)
			maps = append(maps, mc{fmt.Sprintf("%s/%v/host", s.name, conv), h})
		}
		sm, err := e.SubmanifoldMap(gxCoords(t, e, s.coords), s.ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
		require.NoError(t, err)
		maps = append(maps, mc{s.name + "/subm", sm})
	}
	// Given outputs that no input reaches: empty windows.
	g, err := e.StridedMap(gxCoords(t, e, []int32{0, 0, 0, 0, 0, 1, 0, 0}), rext, grid.Cube(2, 2, 0, 1), gxCoords(t, e, []int32{0, 0, 0, 0, 1, 3, 3, 3}))
	require.NoError(t, err)
	maps = append(maps, mc{"empty-windows", g})

	for _, c := range maps {
		for _, C := range []int{1, 3, 32} {
			t.Run(fmt.Sprintf("%s/C%d", c.name, C), func(t *testing.T) {
				m := c.m
				// The CPU kernels read the host tables, which maps built on
				// the GPU download only when asked.
				require.NoError(t, m.Load())
				x := make([]float32, m.NIn*C)
				for i := range x {
					// Few distinct values: ties in max pooling.
					x[i] = float32(rng.IntN(7)) - 3
				}
				if len(x) > 10 {
					x[5] = float32(math.NaN())
				}
				dy := synth.Uniform[float32](rng, m.NOut*C)
				xd, err := e.ToDevice(sparse.Matrix{Rows: m.NIn, Cols: C, Data: x})
				require.NoError(t, err)
				dyd, err := e.ToDevice(sparse.Matrix{Rows: m.NOut, Cols: C, Data: dy})
				require.NoError(t, err)

				wy := make([]float32, m.NOut*C)
				warg := make([]int32, m.NOut*C)
				cpu.MaxPool(m, x, C, wy, warg)
				y, arg, err := e.PoolForward(m, xd, sparse.MaxPool)
				require.NoError(t, err)
				gy := gxF32(t, e, y)
				for i := range wy {
					require.True(t, wy[i] == gy[i] || (math.IsNaN(float64(wy[i])) && math.IsNaN(float64(gy[i]))), "max y[%d]: cpu %v gpu %v", i, wy[i], gy[i])
				}
				require.Equal(t, warg, gxI32(t, e, arg))
				wdx := make([]float32, m.NIn*C)
				cpu.MaxPoolGrad(m, dy, warg, C, wdx)
				dx, err := e.PoolGrad(m, dyd, arg, sparse.MaxPool)
				require.NoError(t, err)
				require.LessOrEqual(t, gxRelL2(gxF32(t, e, dx), wdx), 1e-6)

				for i := range x {
					if math.IsNaN(float64(x[i])) {
						x[i] = 0.5
					}
				}
				xd, err = e.ToDevice(sparse.Matrix{Rows: m.NIn, Cols: C, Data: x})
				require.NoError(t, err)
				wa := make([]float32, m.NOut*C)
				cpu.AvgPool(m, x, C, wa)
				ya, za, err := e.PoolForward(m, xd, sparse.AvgPool)
				require.NoError(t, err)
				require.True(t, za.IsZero())
				require.LessOrEqual(t, gxRelL2(gxF32(t, e, ya), wa), 1e-6)
				wda := make([]float32, m.NIn*C)
				cpu.AvgPoolGrad(m, dy, nil, C, wda)
				dxa, err := e.PoolGrad(m, dyd, sparse.Matrix{}, sparse.AvgPool)
				require.NoError(t, err)
				require.LessOrEqual(t, gxRelL2(gxF32(t, e, dxa), wda), 1e-6)

				// Through the package API (routing to this engine) and in
				// half precision (inputs exact in half, so max is exact).
				ys, _, err := sparse.Pool(m, xd, sparse.AvgPool)
				require.NoError(t, err)
				require.LessOrEqual(t, gxRelL2(gxF32(t, e, ys), wa), 1e-6)
				xh, err := e.ToDeviceAs(sparse.Matrix{Rows: m.NIn, Cols: C, Data: x}, sparse.Float16)
				require.NoError(t, err)
				yh, _, err := e.PoolForward(m, xh, sparse.MaxPool)
				require.NoError(t, err)
				require.Equal(t, sparse.Float16, yh.Data.(*Buffer).DType())
				wyh := make([]float32, m.NOut*C)
				cpu.MaxPool(m, x, C, wyh, warg)
				require.Equal(t, wyh, gxF32(t, e, yh))
			})
		}
	}
}

// TestGPUPoolErrors checks argument validation.
func TestGPUPoolErrors(t *testing.T) {
	e := gxEngine(t)
	c, ext := synth.SphereShell(8, 1)
	m, err := e.StridedMap(gxCoords(t, e, c), ext, grid.Cube(2, 2, 0, 1), sparse.Matrix{})
	require.NoError(t, err)
	x, err := e.Alloc(sparse.Float32, m.NIn+1, 2)
	require.NoError(t, err)
	_, _, err = e.PoolForward(m, x, sparse.MaxPool)
	require.ErrorIs(t, err, sparse.ErrShape)
	xi, err := e.Alloc(sparse.Int32, m.NIn, 2)
	require.NoError(t, err)
	_, _, err = e.PoolForward(m, xi, sparse.MaxPool)
	require.ErrorIs(t, err, sparse.ErrDType)
	_, _, err = e.PoolForward(m, xi, sparse.PoolMode(5))
	require.ErrorIs(t, err, sparse.ErrMode)
	dy, err := e.Alloc(sparse.Float32, m.NOut, 2)
	require.NoError(t, err)
	_, err = e.PoolGrad(m, dy, sparse.Matrix{}, sparse.MaxPool)
	require.Error(t, err)
	bad, err := e.Alloc(sparse.Int32, m.NOut, 3)
	require.NoError(t, err)
	_, err = e.PoolGrad(m, dy, bad, sparse.MaxPool)
	require.ErrorIs(t, err, sparse.ErrShape)
}
