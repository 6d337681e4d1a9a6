package kmap

import (
	"math/rand/v2"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// This file holds the brute-force definitions the builders are tested
// against. They share no code with the package: dense presence grids,
// explicit loops over every output site and tap, floor division.

type dims struct{ B, X, Y, Z int }

func dimsOf(e grid.Extent) dims { return dims{e.Batch, e.X, e.Y, e.Z} }

func (d dims) sites() int { return d.B * d.X * d.Y * d.Z }

func (d dims) inside(b, x, y, z int) bool {
	return b >= 0 && b < d.B && x >= 0 && x < d.X && y >= 0 && y < d.Y && z >= 0 && z < d.Z
}

func (d dims) at(b, x, y, z int) int { return ((b*d.X+x)*d.Y+y)*d.Z + z }

// occupancy returns a dense grid holding the row of every coordinate, −1
// elsewhere.
func occupancy(coords []int32, d dims) []int32 {
	g := make([]int32, d.sites())
	for i := range g {
		g[i] = -1
	}
	for r := 0; r < len(coords)/4; r++ {
		c := coords[4*r:]
		g[d.at(int(c[0]), int(c[1]), int(c[2]), int(c[3]))] = int32(r)
	}
	return g
}

func (d dims) lookup(g []int32, b, x, y, z int) int32 {
	if !d.inside(b, x, y, z) {
		return -1
	}
	return g[d.at(b, x, y, z)]
}

// tapK returns the per-axis kernel index of tap v for kernel K (x-major).
func tapK(K [3]int, v int) [3]int {
	return [3]int{v / (K[1] * K[2]), v / K[2] % K[1], v % K[2]}
}

func vol(K [3]int) int { return K[0] * K[1] * K[2] }

func floorDiv(a, b int) int {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func floorMod(a, b int) int { return a - floorDiv(a, b)*b }

// bruteSubmanifold: Nbr[o, v] = row at coords[o] + (k − ⌊K/2⌋)·D.
func bruteSubmanifold(coords []int32, ext grid.Extent, K, D [3]int) []int32 {
	d := dimsOf(ext)
	g := occupancy(coords, d)
	V := vol(K)
	n := len(coords) / 4
	nbr := make([]int32, n*V)
	for o := range n {
		c := coords[4*o:]
		for v := range V {
			k := tapK(K, v)
			nbr[o*V+v] = d.lookup(g, int(c[0]),
				int(c[1])+(k[0]-K[0]/2)*D[0], int(c[2])+(k[1]-K[1]/2)*D[1], int(c[3])+(k[2]-K[2]/2)*D[2])
		}
	}
	return nbr
}

// bruteStridedExtent is torch's Conv3d output size, or false if empty.
func bruteStridedExtent(ext grid.Extent, c grid.Conv) (grid.Extent, bool) {
	in := [3]int{ext.X, ext.Y, ext.Z}
	var o [3]int
	for a := range 3 {
		num := in[a] + 2*c.Padding[a] - c.Dilation[a]*(c.Kernel[a]-1) - 1
		if num < 0 {
			return grid.Extent{}, false
		}
		o[a] = floorDiv(num, c.Stride[a]) + 1
	}
	return grid.Extent{Batch: ext.Batch, X: o[0], Y: o[1], Z: o[2]}, true
}

// bruteTransposedExtent is torch's ConvTranspose3d output size, or false.
func bruteTransposedExtent(ext grid.Extent, c grid.Conv) (grid.Extent, bool) {
	in := [3]int{ext.X, ext.Y, ext.Z}
	var o [3]int
	for a := range 3 {
		o[a] = (in[a]-1)*c.Stride[a] - 2*c.Padding[a] + c.Dilation[a]*(c.Kernel[a]-1) + 1
		if o[a] <= 0 {
			return grid.Extent{}, false
		}
	}
	return grid.Extent{Batch: ext.Batch, X: o[0], Y: o[1], Z: o[2]}, true
}

// bruteStrided visits every site of the output grid and every tap: the
// input site is out·S − P + k·D. With given == nil the outputs are the
// sites reached at least once, in (b, x, y, z) order.
func bruteStrided(coords []int32, ext grid.Extent, c grid.Conv, given []int32) (grid.Extent, []int32, []int32, bool) {
	out, ok := bruteStridedExtent(ext, c)
	if !ok {
		return out, nil, nil, false
	}
	din, dout := dimsOf(ext), dimsOf(out)
	g := occupancy(coords, din)
	V := vol(c.Kernel)
	row := func(b, x, y, z int) []int32 {
		r := make([]int32, V)
		for v := range V {
			k := tapK(c.Kernel, v)
			r[v] = din.lookup(g, b,
				x*c.Stride[0]-c.Padding[0]+k[0]*c.Dilation[0],
				y*c.Stride[1]-c.Padding[1]+k[1]*c.Dilation[1],
				z*c.Stride[2]-c.Padding[2]+k[2]*c.Dilation[2])
		}
		return r
	}
	var oc, nbr []int32
	if given != nil {
		oc = given
		for o := 0; o < len(given)/4; o++ {
			q := given[4*o:]
			nbr = append(nbr, row(int(q[0]), int(q[1]), int(q[2]), int(q[3]))...)
		}
		return out, oc, nbr, true
	}
	oc = []int32{}
	nbr = []int32{}
	for b := range dout.B {
		for x := range dout.X {
			for y := range dout.Y {
				for z := range dout.Z {
					r := row(b, x, y, z)
					hit := false
					for _, i := range r {
						hit = hit || i >= 0
					}
					if hit {
						oc = append(oc, int32(b), int32(x), int32(y), int32(z))
						nbr = append(nbr, r...)
					}
				}
			}
		}
	}
	return out, oc, nbr, true
}

// bruteTransposed visits every fine site of the output grid and every tap:
// the input is the coarse site c with c·S − P + k·D = f, found by floor
// division of f + P − k·D when it is exact.
func bruteTransposed(coords []int32, ext grid.Extent, c grid.Conv) (grid.Extent, []int32, []int32, bool) {
	out, ok := bruteTransposedExtent(ext, c)
	if !ok {
		return out, nil, nil, false
	}
	din, dout := dimsOf(ext), dimsOf(out)
	g := occupancy(coords, din)
	V := vol(c.Kernel)
	oc, nbr := []int32{}, []int32{}
	for b := range dout.B {
		for x := range dout.X {
			for y := range dout.Y {
				for z := range dout.Z {
					f := [3]int{x, y, z}
					r := make([]int32, V)
					hit := false
					for v := range V {
						k := tapK(c.Kernel, v)
						r[v] = -1
						var src [3]int
						exact := true
						for a := range 3 {
							num := f[a] + c.Padding[a] - k[a]*c.Dilation[a]
							if floorMod(num, c.Stride[a]) != 0 {
								exact = false
							}
							src[a] = floorDiv(num, c.Stride[a])
						}
						if exact {
							r[v] = din.lookup(g, b, src[0], src[1], src[2])
						}
						hit = hit || r[v] >= 0
					}
					if hit {
						oc = append(oc, int32(b), int32(x), int32(y), int32(z))
						nbr = append(nbr, r...)
					}
				}
			}
		}
	}
	return out, oc, nbr, true
}

// bruteInverse: the outputs are the strided inputs (fine sites f), and
// Nbr[i, v] is the strided output at the coarse site c with
// c·S − P + k·D = f (floor division, exact), if that site is an output.
func bruteInverse(coords []int32, ext grid.Extent, c grid.Conv, strOut grid.Extent, strOutCoords []int32) []int32 {
	dout := dimsOf(strOut)
	g := occupancy(strOutCoords, dout)
	V := vol(c.Kernel)
	n := len(coords) / 4
	nbr := make([]int32, n*V)
	for i := range n {
		p := coords[4*i:]
		for v := range V {
			k := tapK(c.Kernel, v)
			nbr[i*V+v] = -1
			var src [3]int
			exact := true
			for a := range 3 {
				num := int(p[1+a]) + c.Padding[a] - k[a]*c.Dilation[a]
				exact = exact && floorMod(num, c.Stride[a]) == 0
				src[a] = floorDiv(num, c.Stride[a])
			}
			if exact {
				nbr[i*V+v] = dout.lookup(g, int(p[0]), src[0], src[1], src[2])
			}
		}
	}
	return nbr
}

// randCoords returns about frac of the sites of ext, unique, always
// including the two extreme corners of every batch, in random order.
func randCoords(rng *rand.Rand, ext grid.Extent, frac float64) []int32 {
	d := dimsOf(ext)
	var out []int32
	for b := range d.B {
		for x := range d.X {
			for y := range d.Y {
				for z := range d.Z {
					corner := (x == 0 && y == 0 && z == 0) || (x == d.X-1 && y == d.Y-1 && z == d.Z-1)
					if corner || rng.Float64() < frac {
						out = append(out, int32(b), int32(x), int32(y), int32(z))
					}
				}
			}
		}
	}
	n := len(out) / 4
	rng.Shuffle(n, func(i, j int) {
		for c := range 4 {
			out[4*i+c], out[4*j+c] = out[4*j+c], out[4*i+c]
		}
	})
	return out
}
