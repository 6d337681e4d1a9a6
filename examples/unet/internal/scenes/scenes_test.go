package scenes

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGenerateDeterministicAndSplit(t *testing.T) {
	cfg := DefaultConfig(7)
	a, err := Generate(cfg, Train, 3)
	require.NoError(t, err)
	b, err := Generate(cfg, Train, 3)
	require.NoError(t, err)
	require.Equal(t, a, b, "same (seed, split, index) gives the same scene")
	c, err := Generate(cfg, HeldOut, 3)
	require.NoError(t, err)
	require.NotEqual(t, a.Coords, c.Coords, "splits differ")
	cfg2 := cfg
	cfg2.Seed = 8
	d, err := Generate(cfg2, Train, 3)
	require.NoError(t, err)
	require.NotEqual(t, a.Coords, d.Coords, "seeds differ")
}

func TestSceneInvariants(t *testing.T) {
	for _, solid := range []bool{false, true} {
		cfg := Config{Grid: 24, MinShapes: 1, MaxShapes: 3, Solid: solid, Seed: 1}
		var perClass [NumClasses]int
		for i := range 40 {
			s, err := Generate(cfg, Train, i)
			require.NoError(t, err)
			require.Equal(t, 3*s.N(), len(s.Coords))
			require.GreaterOrEqual(t, len(s.Shapes), cfg.MinShapes)
			require.LessOrEqual(t, len(s.Shapes), cfg.MaxShapes)
			require.Positive(t, s.N())
			seen := map[[3]int32]bool{}
			for r := range s.N() {
				p := [3]int32{s.Coords[3*r], s.Coords[3*r+1], s.Coords[3*r+2]}
				for _, v := range p {
					require.True(t, v >= 0 && int(v) < cfg.Grid, "inside the grid")
				}
				require.False(t, seen[p], "unique voxels")
				seen[p] = true
				if r > 0 { // (x, y, z) order
					q := s.Coords[3*r-3 : 3*r]
					require.True(t, q[0] < p[0] || (q[0] == p[0] && (q[1] < p[1] || (q[1] == p[1] && q[2] < p[2]))))
				}
				// The label is the last shape that covers the voxel.
				want := Class(-1)
				for _, sh := range s.Shapes {
					d := sh.Distance([3]float64{float64(p[0]), float64(p[1]), float64(p[2])})
					if (solid && d <= 0) || (!solid && math.Abs(d) <= shellHalfWidth) {
						want = sh.Class
					}
				}
				require.Equal(t, want, s.Labels[r])
				perClass[s.Labels[r]]++
			}
		}
		for c, n := range perClass {
			require.Positive(t, n, "class %v appears", Class(c))
		}
	}
}

// TestDistance checks each signed distance at points whose distance is
// known, under a random rotation and translation.
func TestDistance(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	rot := randomRotation(r)
	// rows of rot are orthonormal
	for i := range 3 {
		for j := range 3 {
			d := 0.0
			for k := range 3 {
				d += rot[3*i+k] * rot[3*j+k]
			}
			want := 0.0
			if i == j {
				want = 1
			}
			require.InDelta(t, want, d, 1e-12)
		}
	}
	c := [3]float64{10, 11, 12}
	// world point at local offset q: p = c + Rᵀ q
	at := func(q [3]float64) [3]float64 {
		var p [3]float64
		for a := range 3 {
			p[a] = c[a] + rot[a]*q[0] + rot[3+a]*q[1] + rot[6+a]*q[2]
		}
		return p
	}
	for _, tc := range []struct {
		s    Shape
		q    [3]float64
		want float64
	}{
		{Shape{Class: Sphere, Size: [3]float64{5}}, [3]float64{0, 0, 7}, 2},
		{Shape{Class: Sphere, Size: [3]float64{5}}, [3]float64{0, 0, 0}, -5},
		{Shape{Class: Box, Size: [3]float64{2, 3, 4}}, [3]float64{0, 0, 0}, -2},
		{Shape{Class: Box, Size: [3]float64{2, 3, 4}}, [3]float64{5, 7, 4}, 5},
		{Shape{Class: Cylinder, Size: [3]float64{3, 4}}, [3]float64{0, 5, 0}, 2},
		{Shape{Class: Cylinder, Size: [3]float64{3, 4}}, [3]float64{0, 0, 6}, 2},
		{Shape{Class: Cylinder, Size: [3]float64{3, 4}}, [3]float64{0, 0, 3}, -1},
		{Shape{Class: Torus, Size: [3]float64{6, 2}}, [3]float64{6, 0, 0}, -2},
		{Shape{Class: Torus, Size: [3]float64{6, 2}}, [3]float64{0, 0, 0}, 4},
	} {
		tc.s.Center, tc.s.Rot = c, rot
		require.InDelta(t, tc.want, tc.s.Distance(at(tc.q)), 1e-9, "%v at %v", tc.s.Class, tc.q)
	}
}

func TestDatasetAndStack(t *testing.T) {
	cfg := Config{Grid: 16, MinShapes: 1, MaxShapes: 2, Seed: 3}
	ds, err := NewDataset(cfg, 3, 2, 1)
	require.NoError(t, err)
	require.Len(t, ds.Train, 2)
	require.Len(t, ds.HeldOut, 1)
	b := ds.Train[1]
	require.Len(t, b.Scenes, 3)
	total := 0
	for i, s := range b.Scenes {
		want, err := Generate(cfg, Train, 3+i)
		require.NoError(t, err)
		require.Equal(t, want, s)
		for r := range s.N() {
			row := b.Coords[4*(total+r) : 4*(total+r)+4]
			require.Equal(t, []int32{int32(i), s.Coords[3*r], s.Coords[3*r+1], s.Coords[3*r+2]}, row)
			require.Equal(t, int32(s.Labels[r]), b.Labels[total+r])
		}
		total += s.N()
	}
	require.Equal(t, total, b.N())
	again, err := MakeBatch(cfg, Train, 1, 3)
	require.NoError(t, err)
	require.Equal(t, b, again, "a batch is a pure function of its index")
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{Grid: 8, MinShapes: 1, MaxShapes: 1},
		{Grid: 32, MinShapes: 0, MaxShapes: 1},
		{Grid: 32, MinShapes: 3, MaxShapes: 2},
		{Grid: 32, MinShapes: 1, MaxShapes: 100},
	} {
		_, err := Generate(cfg, Train, 0)
		require.ErrorIs(t, err, ErrConfig)
	}
	_, err := Generate(DefaultConfig(1), Train, -1)
	require.ErrorIs(t, err, ErrConfig)
	_, err = NewDataset(DefaultConfig(1), 0, 1, 1)
	require.ErrorIs(t, err, ErrConfig)
	_, err = MakeBatch(DefaultConfig(1), Train, -1, 2)
	require.ErrorIs(t, err, ErrConfig)
	_, err = MakeBatch(DefaultConfig(1), Train, 0, 0)
	require.ErrorIs(t, err, ErrConfig)
	require.Equal(t, "torus", Torus.String())
	require.Equal(t, "held-out", HeldOut.String())
}
