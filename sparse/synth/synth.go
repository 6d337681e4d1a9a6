// Package synth generates synthetic sparse scenes for tests and
// benchmarks: the spherical shell of FlexGEMM's benchmarks, random sparse
// coordinate sets, and random features and weights.
//
// # Sphere shell
//
// SphereShell reproduces FlexGEMM's tests/utils.py sphere_coords: in a
// res³ grid, voxel (i, j, k) is active iff the distance d of its centre
// (i+½, j+½, k+½) from (res/2, res/2, res/2) satisfies
// res/2 − 1.25 ≤ d ≤ res/2. For res = 64 that is N = 15,192 voxels and
// 191,208 submanifold 3×3×3 neighbour pairs, the standard benchmark scene.
//
// All generators are deterministic functions of their arguments and of the
// random source they are given.
package synth

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// SphereShell returns the active voxels of a spherical shell of thickness
// 1.25 and outer radius res/2 in a res³ grid, copied into batch grids
// (batch index 0…batch−1, batch-major, then x, y, z ascending), as flat
// [N, 4] coordinates, and the extent {batch, res, res, res}. The test is
// exact: squared distances of half-integer offsets are compared in float64,
// where every value involved is a multiple of 1/16 and representable.
// It panics if res or batch is not positive.
func SphereShell(res, batch int) (coords []int32, ext grid.Extent) {
	if res <= 0 || batch <= 0 {
		panic(fmt.Sprintf("synth: SphereShell(%d, %d): size and batch must be positive", res, batch))
	}
	ext = grid.Extent{Batch: batch, X: res, Y: res, Z: res}
	c := float64(res) / 2
	outer := c * c
	inner := c - 1.25
	innerSq := inner * inner
	if inner < 0 {
		innerSq = 0
	}
	var one []int32
	for i := range res {
		dx := float64(i) + 0.5 - c
		for j := range res {
			dy := float64(j) + 0.5 - c
			for k := range res {
				dz := float64(k) + 0.5 - c
				d := dx*dx + dy*dy + dz*dz
				if d >= innerSq && d <= outer {
					one = append(one, int32(i), int32(j), int32(k))
				}
			}
		}
	}
	n := len(one) / 3
	coords = make([]int32, 0, 4*n*batch)
	for b := range batch {
		for r := range n {
			coords = append(coords, int32(b), one[3*r], one[3*r+1], one[3*r+2])
		}
	}
	return coords, ext
}

// RandomScene returns distinct random sites of ext as flat [N, 4]
// coordinates, each site active with probability density (clamped to
// [0, 1]), sorted by (batch, x, y, z). For grids of more than 1<<24 sites
// it draws round(density·sites) distinct sites instead of visiting every
// site.
func RandomScene(rng *rand.Rand, ext grid.Extent, density float64) []int32 {
	if err := ext.Validate(); err != nil {
		panic(fmt.Sprintf("synth: RandomScene: %v", err))
	}
	density = min(1, max(0, density))
	sites := ext.Sites()
	var keys []uint64
	if sites <= 1<<24 {
		for k := range sites {
			if rng.Float64() < density {
				keys = append(keys, k)
			}
		}
	} else {
		want := int(density*float64(sites) + 0.5)
		seen := make(map[uint64]bool, want)
		for len(seen) < want {
			seen[rng.Uint64N(sites)] = true
		}
		for k := range seen {
			keys = append(keys, k)
		}
		slices.Sort(keys)
	}
	coords := make([]int32, 4*len(keys))
	for r, k := range keys {
		b, x, y, z := ext.Unkey(k)
		coords[4*r], coords[4*r+1], coords[4*r+2], coords[4*r+3] = int32(b), int32(x), int32(y), int32(z)
	}
	return coords
}

// Float is the element type of generated features and weights.
type Float interface{ ~float32 | ~float64 }

// Uniform returns n values drawn uniformly from [−1, 1).
func Uniform[T Float](rng *rand.Rand, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = T(2*rng.Float64() - 1)
	}
	return out
}

// Normal returns n standard normal values.
func Normal[T Float](rng *rand.Rand, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = T(rng.NormFloat64())
	}
	return out
}

// Features returns random [n, c] features, uniform in [−1, 1).
func Features[T Float](rng *rand.Rand, n, c int) []T { return Uniform[T](rng, n*c) }

// Weights returns a random weight [co, V·ci] (the layout [Co, Kx, Ky, Kz,
// Ci] flattened), uniform in [−s, s) with s = 1/√(V·ci), the fan-in scale
// that keeps outputs of order one.
func Weights[T Float](rng *rand.Rand, co, V, ci int) []T {
	w := make([]T, co*V*ci)
	s := 1.0
	if V*ci > 0 {
		s = 1 / math.Sqrt(float64(V*ci))
	}
	for i := range w {
		w[i] = T(s * (2*rng.Float64() - 1))
	}
	return w
}

// TapMasks returns rows random single-word tap masks of taps ≤ 64 taps
// (bit v set: the row has a neighbour at tap v), for tests of the masked
// orders: each tap present with probability 1/3. With pool > 0 every
// row's mask is drawn from pool such masks (so that equal masks repeat:
// long runs once the rows are sorted by mask), else each row's is its own.
func TapMasks(rng *rand.Rand, rows, taps, pool int) []uint64 {
	if taps < 0 || taps > 64 {
		panic(fmt.Sprintf("synth: TapMasks of %d taps (want 0 to 64)", taps))
	}
	random := func() (m uint64) {
		for v := range taps {
			if rng.IntN(3) == 0 {
				m |= 1 << v
			}
		}
		return m
	}
	from := make([]uint64, max(pool, 0))
	for i := range from {
		from[i] = random()
	}
	masks := make([]uint64, rows)
	for r := range masks {
		if pool > 0 {
			masks[r] = from[rng.IntN(pool)]
		} else {
			masks[r] = random()
		}
	}
	return masks
}
