// Package reference is a float64 brute-force oracle for sparse 3D
// convolution, used by tests. It knows nothing of kernel maps: it densifies
// the sparse input into a [B, X, Y, Z, C] volume, runs the textbook dense
// loops of torch.nn.Conv3d and ConvTranspose3d (per-axis stride, padding
// and dilation), and reads the result at the requested output
// coordinates. Gradients are written directly from the definitions of the
// forward loops. Nothing here is fast; everything is meant to be obviously
// correct.
//
// # Conventions
//
// Coordinates are flat [N, 4] int32 rows (batch, x, y, z). Features are
// row-major [N, C] float64. Weights are [Co, Kx, Ky, Kz, Ci] flattened, the
// layout of torch's Conv3d weight [Co, Ci, Kx, Ky, Kz] permuted by
// (0, 2, 3, 4, 1). A strided convolution reads, for output site o and
// kernel index k, the input site
//
//	f = o·stride − padding + k·dilation     (per axis)
//
// and a transposed convolution writes input site i through kernel index k
// to the output site f = i·stride − padding + k·dilation.
package reference

import (
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// Sparse is a sparse input: coordinates, features and the grid they live
// in.
type Sparse struct {
	Coords []int32     // [N, 4]
	Feats  []float64   // [N, C]
	C      int         // channels
	Extent grid.Extent // grid of the coordinates
}

// N returns the number of active sites.
func (s Sparse) N() int { return len(s.Coords) / 4 }

// Weight is a convolution weight [Co, Kx, Ky, Kz, Ci].
type Weight struct {
	W      []float64
	Co, Ci int
	K      [3]int
}

// at returns the index of w[co, kx, ky, kz, ci].
func (w Weight) at(co, kx, ky, kz, ci int) int {
	return (((co*w.K[0]+kx)*w.K[1]+ky)*w.K[2]+kz)*w.Ci + ci
}

// Geometry is the stride, padding and dilation of a convolution, per axis
// (x, y, z).
type Geometry struct {
	Stride, Padding, Dilation [3]int
}

// volume is a dense [B, X, Y, Z, C] array.
type volume struct {
	ext grid.Extent
	c   int
	v   []float64
}

func newVolume(ext grid.Extent, c int) *volume {
	return &volume{ext: ext, c: c, v: make([]float64, ext.Batch*ext.X*ext.Y*ext.Z*c)}
}

// inside reports whether (x, y, z) lies in the spatial grid.
func (vol *volume) inside(x, y, z int) bool {
	e := vol.ext
	return x >= 0 && x < e.X && y >= 0 && y < e.Y && z >= 0 && z < e.Z
}

// site returns the C values of site (b, x, y, z).
func (vol *volume) site(b, x, y, z int) []float64 {
	e := vol.ext
	i := (((b*e.X+x)*e.Y+y)*e.Z + z) * vol.c
	return vol.v[i : i+vol.c]
}

// densify scatters the sparse features into a zero volume.
func densify(s Sparse) *volume {
	vol := newVolume(s.Extent, s.C)
	for r := range s.N() {
		c := s.Coords[4*r : 4*r+4]
		copy(vol.site(int(c[0]), int(c[1]), int(c[2]), int(c[3])), s.Feats[r*s.C:(r+1)*s.C])
	}
	return vol
}

// ConvExtent returns torch.nn.Conv3d's output size for kernel k:
// ⌊(n + 2P − D·(K−1) − 1)/S⌋ + 1 per axis (values below 1 are returned as
// they are; the caller decides what an empty output means).
func ConvExtent(in grid.Extent, k [3]int, g Geometry) grid.Extent {
	var o [3]int
	n := [3]int{in.X, in.Y, in.Z}
	for a := range 3 {
		num := n[a] + 2*g.Padding[a] - g.Dilation[a]*(k[a]-1) - 1
		if num < 0 {
			o[a] = 0
			continue
		}
		o[a] = num/g.Stride[a] + 1
	}
	return grid.Extent{Batch: in.Batch, X: o[0], Y: o[1], Z: o[2]}
}

// TransposeExtent returns torch.nn.ConvTranspose3d's output size for
// kernel k (no output padding): (n − 1)·S − 2P + D·(K−1) + 1 per axis.
func TransposeExtent(in grid.Extent, k [3]int, g Geometry) grid.Extent {
	var o [3]int
	n := [3]int{in.X, in.Y, in.Z}
	for a := range 3 {
		o[a] = (n[a]-1)*g.Stride[a] - 2*g.Padding[a] + g.Dilation[a]*(k[a]-1) + 1
	}
	return grid.Extent{Batch: in.Batch, X: o[0], Y: o[1], Z: o[2]}
}

// convTaps calls f(kx, ky, kz, fx, fy, fz) for every kernel index whose
// input site f = o·S − P + k·D lies inside vol.
func convTaps(vol *volume, k [3]int, g Geometry, ox, oy, oz int, f func(kx, ky, kz, fx, fy, fz int)) {
	for kx := range k[0] {
		fx := ox*g.Stride[0] - g.Padding[0] + kx*g.Dilation[0]
		for ky := range k[1] {
			fy := oy*g.Stride[1] - g.Padding[1] + ky*g.Dilation[1]
			for kz := range k[2] {
				fz := oz*g.Stride[2] - g.Padding[2] + kz*g.Dilation[2]
				if vol.inside(fx, fy, fz) {
					f(kx, ky, kz, fx, fy, fz)
				}
			}
		}
	}
}

// Conv3d evaluates the dense convolution of the densified input at the
// output coordinates out ([M, 4], sites of the output grid):
//
//	y[m, co] = bias[co] + Σ_{k, ci} w[co, k, ci] · vol[b, o·S − P + k·D, ci]
//
// with sites outside the input grid reading zero. bias may be nil. The
// result is [M, Co].
func Conv3d(in Sparse, w Weight, bias []float64, g Geometry, out []int32) []float64 {
	vol := densify(in)
	m := len(out) / 4
	y := make([]float64, m*w.Co)
	for r := range m {
		b, ox, oy, oz := int(out[4*r]), int(out[4*r+1]), int(out[4*r+2]), int(out[4*r+3])
		for co := range w.Co {
			s := 0.0
			if bias != nil {
				s = bias[co]
			}
			convTaps(vol, w.K, g, ox, oy, oz, func(kx, ky, kz, fx, fy, fz int) {
				x := vol.site(b, fx, fy, fz)
				for ci := range w.Ci {
					s += w.W[w.at(co, kx, ky, kz, ci)] * x[ci]
				}
			})
			y[r*w.Co+co] = s
		}
	}
	return y
}

// Conv3dGrad returns the gradients of L = Σ y ⊙ dy for y = Conv3d(in, w,
// bias, g, out): dx [N, Ci] at the input sites, dw like w.W, and db [Co].
// Since y[m, co] = bias[co] + Σ w[co, k, ci]·vol[f(m, k), ci],
// ∂L/∂vol[f, ci] = Σ_{m, k : f(m, k) = f} Σ_co dy[m, co]·w[co, k, ci],
// ∂L/∂w[co, k, ci] = Σ_m dy[m, co]·vol[f(m, k), ci] and ∂L/∂b = Σ_m dy[m].
func Conv3dGrad(in Sparse, w Weight, g Geometry, out []int32, dy []float64) (dx, dw, db []float64) {
	vol := densify(in)
	dvol := newVolume(in.Extent, in.C)
	dw = make([]float64, len(w.W))
	db = make([]float64, w.Co)
	for r := range len(out) / 4 {
		b, ox, oy, oz := int(out[4*r]), int(out[4*r+1]), int(out[4*r+2]), int(out[4*r+3])
		for co := range w.Co {
			gr := dy[r*w.Co+co]
			db[co] += gr
			convTaps(vol, w.K, g, ox, oy, oz, func(kx, ky, kz, fx, fy, fz int) {
				x := vol.site(b, fx, fy, fz)
				dxs := dvol.site(b, fx, fy, fz)
				for ci := range w.Ci {
					dw[w.at(co, kx, ky, kz, ci)] += gr * x[ci]
					dxs[ci] += gr * w.W[w.at(co, kx, ky, kz, ci)]
				}
			})
		}
	}
	return gather(dvol, in.Coords), dw, db
}

// gather reads a volume at sparse coordinates.
func gather(vol *volume, coords []int32) []float64 {
	n := len(coords) / 4
	out := make([]float64, n*vol.c)
	for r := range n {
		c := coords[4*r : 4*r+4]
		copy(out[r*vol.c:], vol.site(int(c[0]), int(c[1]), int(c[2]), int(c[3])))
	}
	return out
}

// transposeTaps calls f(kx, ky, kz, fx, fy, fz) for every kernel index
// whose output site f = i·S − P + k·D lies inside outExt.
func transposeTaps(outExt grid.Extent, k [3]int, g Geometry, ix, iy, iz int, f func(kx, ky, kz, fx, fy, fz int)) {
	for kx := range k[0] {
		fx := ix*g.Stride[0] - g.Padding[0] + kx*g.Dilation[0]
		for ky := range k[1] {
			fy := iy*g.Stride[1] - g.Padding[1] + ky*g.Dilation[1]
			for kz := range k[2] {
				fz := iz*g.Stride[2] - g.Padding[2] + kz*g.Dilation[2]
				if fx >= 0 && fx < outExt.X && fy >= 0 && fy < outExt.Y && fz >= 0 && fz < outExt.Z {
					f(kx, ky, kz, fx, fy, fz)
				}
			}
		}
	}
}

// ConvTranspose3d evaluates the transposed convolution in scatter form
// over a dense output volume of extent outExt and reads it at out
// ([M, 4]):
//
//	vol[b, i·S − P + k·D, co] += w[co, k, ci] · x[i, ci]   for every input i, k
//	y[m, co] = bias[co] + vol[out[m], co]
func ConvTranspose3d(in Sparse, w Weight, bias []float64, g Geometry, outExt grid.Extent, out []int32) []float64 {
	vol := newVolume(outExt, w.Co)
	for r := range in.N() {
		c := in.Coords[4*r : 4*r+4]
		b := int(c[0])
		x := in.Feats[r*in.C : (r+1)*in.C]
		transposeTaps(outExt, w.K, g, int(c[1]), int(c[2]), int(c[3]), func(kx, ky, kz, fx, fy, fz int) {
			ys := vol.site(b, fx, fy, fz)
			for co := range w.Co {
				for ci := range w.Ci {
					ys[co] += w.W[w.at(co, kx, ky, kz, ci)] * x[ci]
				}
			}
		})
	}
	y := gather(vol, out)
	if bias != nil {
		for r := range len(out) / 4 {
			for co := range w.Co {
				y[r*w.Co+co] += bias[co]
			}
		}
	}
	return y
}

// ConvTranspose3dGrad returns dx [N, Ci], dw and db [Co] of
// L = Σ y ⊙ dy for y = ConvTranspose3d(in, w, bias, g, outExt, out): with
// dvol the densified dy (zero away from out),
// ∂L/∂x[i, ci] = Σ_{k, co} w[co, k, ci]·dvol[f(i, k), co] and
// ∂L/∂w[co, k, ci] = Σ_i dvol[f(i, k), co]·x[i, ci].
func ConvTranspose3dGrad(in Sparse, w Weight, g Geometry, outExt grid.Extent, out []int32, dy []float64) (dx, dw, db []float64) {
	dvol := densify(Sparse{Coords: out, Feats: dy, C: w.Co, Extent: outExt})
	dx = make([]float64, in.N()*w.Ci)
	dw = make([]float64, len(w.W))
	db = make([]float64, w.Co)
	for r := range len(out) / 4 {
		for co := range w.Co {
			db[co] += dy[r*w.Co+co]
		}
	}
	for r := range in.N() {
		c := in.Coords[4*r : 4*r+4]
		b := int(c[0])
		x := in.Feats[r*in.C : (r+1)*in.C]
		transposeTaps(outExt, w.K, g, int(c[1]), int(c[2]), int(c[3]), func(kx, ky, kz, fx, fy, fz int) {
			gs := dvol.site(b, fx, fy, fz)
			for co := range w.Co {
				for ci := range w.Ci {
					dx[r*w.Ci+ci] += w.W[w.at(co, kx, ky, kz, ci)] * gs[co]
					dw[w.at(co, kx, ky, kz, ci)] += gs[co] * x[ci]
				}
			}
		})
	}
	return dx, dw, db
}

// SubmanifoldGeometry returns stride 1 and padding ⌊K/2⌋·D: the geometry
// under which a convolution with odd kernel k maps the input grid onto
// itself, centred.
func SubmanifoldGeometry(k, dilation [3]int) Geometry {
	g := Geometry{Stride: [3]int{1, 1, 1}, Dilation: dilation}
	for a := range 3 {
		g.Padding[a] = k[a] / 2 * dilation[a]
	}
	return g
}

// SubmanifoldConv3d is Conv3d with SubmanifoldGeometry evaluated at the
// input sites only.
func SubmanifoldConv3d(in Sparse, w Weight, bias []float64, dilation [3]int) []float64 {
	return Conv3d(in, w, bias, SubmanifoldGeometry(w.K, dilation), in.Coords)
}

// SubmanifoldConv3dGrad is Conv3dGrad of SubmanifoldConv3d.
func SubmanifoldConv3dGrad(in Sparse, w Weight, dilation [3]int, dy []float64) (dx, dw, db []float64) {
	return Conv3dGrad(in, w, SubmanifoldGeometry(w.K, dilation), in.Coords, dy)
}

// ConvOutputs returns the sites of the Conv3d output grid (ConvExtent)
// whose window contains at least one active input, sorted by (b, x, y, z):
// the outputs of a generative sparse convolution.
func ConvOutputs(coords []int32, ext grid.Extent, k [3]int, g Geometry) []int32 {
	active := densify(Sparse{Coords: coords, Feats: ones(len(coords) / 4), C: 1, Extent: ext})
	oe := ConvExtent(ext, k, g)
	var out []int32
	for b := range oe.Batch {
		for ox := range oe.X {
			for oy := range oe.Y {
				for oz := range oe.Z {
					hit := false
					convTaps(active, k, g, ox, oy, oz, func(_, _, _, fx, fy, fz int) {
						hit = hit || active.site(b, fx, fy, fz)[0] != 0
					})
					if hit {
						out = append(out, int32(b), int32(ox), int32(oy), int32(oz))
					}
				}
			}
		}
	}
	return out
}

// TransposeOutputs returns the sites of outExt reached from an active
// input by some kernel index, sorted by (b, x, y, z): the outputs of a
// sparse transposed convolution.
func TransposeOutputs(coords []int32, k [3]int, g Geometry, outExt grid.Extent) []int32 {
	reached := newVolume(outExt, 1)
	for r := range len(coords) / 4 {
		c := coords[4*r : 4*r+4]
		transposeTaps(outExt, k, g, int(c[1]), int(c[2]), int(c[3]), func(_, _, _, fx, fy, fz int) {
			reached.site(int(c[0]), fx, fy, fz)[0] = 1
		})
	}
	var out []int32
	for b := range outExt.Batch {
		for x := range outExt.X {
			for y := range outExt.Y {
				for z := range outExt.Z {
					if reached.site(b, x, y, z)[0] != 0 {
						out = append(out, int32(b), int32(x), int32(y), int32(z))
					}
				}
			}
		}
	}
	return out
}

func ones(n int) []float64 {
	return slices.Repeat([]float64{1}, n)
}
