package scenes

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// voxeliseBrute is the reference rasteriser: it tests every voxel of each
// shape's bounding box.
func voxeliseBrute(cfg Config, shapes []Shape) *Scene {
	g := cfg.Grid
	label := make([]int8, g*g*g)
	for i := range label {
		label[i] = -1
	}
	for _, s := range shapes {
		rad := s.Radius() + 1
		var lo, hi [3]int
		for a := range 3 {
			lo[a] = max(0, int(math.Floor(s.Center[a]-rad)))
			hi[a] = min(g-1, int(math.Ceil(s.Center[a]+rad)))
		}
		for x := lo[0]; x <= hi[0]; x++ {
			for y := lo[1]; y <= hi[1]; y++ {
				for z := lo[2]; z <= hi[2]; z++ {
					d := s.Distance([3]float64{float64(x), float64(y), float64(z)})
					if (cfg.Solid && d <= 0) || (!cfg.Solid && math.Abs(d) <= shellHalfWidth) {
						label[(x*g+y)*g+z] = int8(s.Class)
					}
				}
			}
		}
	}
	sc := &Scene{Shapes: shapes}
	for i, l := range label {
		if l >= 0 {
			sc.Coords = append(sc.Coords, int32(i/(g*g)), int32(i/g%g), int32(i%g))
			sc.Labels = append(sc.Labels, Class(l))
		}
	}
	return sc
}

// TestVoxeliseMatchesBruteForce checks that culling voxels by their
// distance from the shape centre never changes a scene: generated scenes
// and random shapes of every class (thin, thick, off-centre, partly
// outside the grid, tori whose tube covers the centre) give exactly the
// brute-force voxels and labels.
func TestVoxeliseMatchesBruteForce(t *testing.T) {
	grids := []int{16, 24, 32, 64}
	scenesPer := 12
	if testing.Short() {
		grids, scenesPer = []int{16, 32}, 4
	}
	for _, solid := range []bool{false, true} {
		for _, g := range grids {
			cfg := Config{Grid: g, MinShapes: 1, MaxShapes: 4, Solid: solid, Seed: 11}
			for i := range scenesPer {
				s, err := Generate(cfg, Train, i)
				require.NoError(t, err)
				require.Equal(t, voxeliseBrute(cfg, s.Shapes), s, "grid %d solid %v scene %d", g, solid, i)
			}
			r := rand.New(rand.NewPCG(uint64(g), 3))
			for i := range 4 * scenesPer {
				sh := Shape{Class: Class(r.IntN(NumClasses)), Rot: randomRotation(r)}
				for a := range 3 {
					sh.Center[a] = float64(g)*1.4*r.Float64() - 0.2*float64(g)
					sh.Size[a] = 0.05 + float64(g)/4*r.Float64()*r.Float64()
				}
				shapes := []Shape{sh}
				require.Equal(t, voxeliseBrute(cfg, shapes), voxelise(cfg, shapes), "grid %d solid %v shape %d: %+v", g, solid, i, sh)
			}
		}
	}
}

// TestMakeBatchAnyGOMAXPROCS checks that generating the scenes of a batch
// in parallel gives the same batch for any number of goroutines, equal to
// stacking the scenes generated one by one.
func TestMakeBatchAnyGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	cfg := Config{Grid: 24, MinShapes: 1, MaxShapes: 3, Seed: 9}
	var want *Batch
	for _, procs := range []int{1, 2, 3, 8} {
		runtime.GOMAXPROCS(procs)
		for _, size := range []int{1, 5} {
			b, err := MakeBatch(cfg, HeldOut, 2, size)
			require.NoError(t, err)
			sc := make([]*Scene, size)
			for i := range sc {
				sc[i], err = Generate(cfg, HeldOut, 2*size+i)
				require.NoError(t, err)
			}
			require.Equal(t, Stack(sc...), b, "procs %d size %d", procs, size)
			if size == 5 {
				if want == nil {
					want = b
				}
				require.Equal(t, want, b, "procs %d", procs)
			}
		}
		_, err := MakeBatch(Config{Grid: 8, MinShapes: 1, MaxShapes: 1}, Train, 0, 4)
		require.ErrorIs(t, err, ErrConfig)
	}
	require.Equal(t, &Batch{}, Stack())
}
