// Package grid describes batched voxel grids and convolution geometry: the
// spatial extent of a sparse tensor, exact packing of (batch, x, y, z) into
// integer keys, and the kernel/stride/padding/dilation relation that every
// kernel map in this module is built from.
//
// # Conventions
//
// Coordinates are stored as a flat []int32 of length 4·N, row r holding
// (batch, x, y, z) at [4r, 4r+4). This is the row-major layout of an int32
// [N, 4] array in numpy or PyTorch.
//
// A convolution tap v enumerates the kernel window x-major:
//
//	v = (kx·Ky + ky)·Kz + kz
//
// which matches the weight layout [Co, Kx, Ky, Kz, Ci].
//
// The one relation between a fine (higher resolution) site f, a coarse site
// c and a tap k on each axis is
//
//	f = c·stride − padding + k·dilation
//
// A strided convolution reads fine inputs for a coarse output; a transposed
// convolution writes fine outputs from coarse inputs. Submanifold
// convolution has stride 1 and padding ⌊K/2⌋·dilation.
package grid

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// ErrBadExtent reports an extent with a non-positive dimension or one whose
// volume does not fit in 64 bits.
var ErrBadExtent = errors.New("grid: bad extent")

// ErrBadGeometry reports an invalid kernel, stride, padding or dilation.
var ErrBadGeometry = errors.New("grid: bad convolution geometry")

// Extent is the size of a batched voxel grid: Batch grids of X×Y×Z voxels.
type Extent struct {
	Batch, X, Y, Z int
}

// Validate reports whether every dimension is positive and the number of
// sites Batch·X·Y·Z fits in an unsigned 64-bit key.
func (e Extent) Validate() error {
	if e.Batch <= 0 || e.X <= 0 || e.Y <= 0 || e.Z <= 0 {
		return fmt.Errorf("%w: %v has a non-positive dimension", ErrBadExtent, e)
	}
	if _, ok := e.volume(); !ok {
		return fmt.Errorf("%w: %v has more than 2^64 sites", ErrBadExtent, e)
	}
	return nil
}

func (e Extent) volume() (uint64, bool) {
	v := uint64(1)
	for _, d := range [4]int{e.Batch, e.X, e.Y, e.Z} {
		hi, lo := bits.Mul64(v, uint64(d))
		if hi != 0 {
			return 0, false
		}
		v = lo
	}
	return v, true
}

// Sites returns Batch·X·Y·Z. It is only meaningful for a valid extent.
func (e Extent) Sites() uint64 {
	v, _ := e.volume()
	return v
}

// KeyBits returns the number of bits needed to hold every key of the extent:
// 32 when every key is below 2^32 − 1 (so that 32-bit hash tables keep
// 2^32 − 1 free as their empty-slot sentinel, as FlexGEMM's do), else 64.
func (e Extent) KeyBits() int {
	if v, ok := e.volume(); ok && v <= math.MaxUint32 {
		return 32
	}
	return 64
}

// Spatial returns the spatial dimensions as an array (X, Y, Z).
func (e Extent) Spatial() [3]int { return [3]int{e.X, e.Y, e.Z} }

// Contains reports whether (b, x, y, z) lies inside the extent.
func (e Extent) Contains(b, x, y, z int) bool {
	return b >= 0 && b < e.Batch && x >= 0 && x < e.X && y >= 0 && y < e.Y && z >= 0 && z < e.Z
}

// Key packs a site inside the extent into its exact row-major index
// b·X·Y·Z + x·Y·Z + y·Z + z. The caller must check Contains first.
func (e Extent) Key(b, x, y, z int) uint64 {
	return ((uint64(b)*uint64(e.X)+uint64(x))*uint64(e.Y)+uint64(y))*uint64(e.Z) + uint64(z)
}

// Unkey is the inverse of Key.
func (e Extent) Unkey(k uint64) (b, x, y, z int) {
	z = int(k % uint64(e.Z))
	k /= uint64(e.Z)
	y = int(k % uint64(e.Y))
	k /= uint64(e.Y)
	x = int(k % uint64(e.X))
	b = int(k / uint64(e.X))
	return
}

// String implements fmt.Stringer for Extent.
func (e Extent) String() string {
	return fmt.Sprintf("Extent{Batch:%d X:%d Y:%d Z:%d}", e.Batch, e.X, e.Y, e.Z)
}

// Conv is the geometry of a 3D convolution, per axis (x, y, z).
type Conv struct {
	Kernel   [3]int
	Stride   [3]int
	Padding  [3]int
	Dilation [3]int
}

// Cube returns a geometry with the same kernel size, stride, padding and
// dilation on every axis.
func Cube(kernel, stride, padding, dilation int) Conv {
	return Conv{
		Kernel:   [3]int{kernel, kernel, kernel},
		Stride:   [3]int{stride, stride, stride},
		Padding:  [3]int{padding, padding, padding},
		Dilation: [3]int{dilation, dilation, dilation},
	}
}

// Submanifold returns the geometry of a submanifold convolution with the
// given odd kernel size and dilation per axis: stride 1 and padding
// ⌊K/2⌋·dilation, so that tap ⌊V/2⌋ is the centre.
func Submanifold(kernel, dilation [3]int) Conv {
	c := Conv{Kernel: kernel, Dilation: dilation, Stride: [3]int{1, 1, 1}}
	for a := range 3 {
		c.Padding[a] = kernel[a] / 2 * dilation[a]
	}
	return c
}

// Validate reports whether the kernel, stride and dilation are positive and
// the padding non-negative.
func (c Conv) Validate() error {
	for a := range 3 {
		switch {
		case c.Kernel[a] <= 0:
			return fmt.Errorf("%w: kernel size %v must be positive", ErrBadGeometry, c.Kernel)
		case c.Stride[a] <= 0:
			return fmt.Errorf("%w: stride %v must be positive", ErrBadGeometry, c.Stride)
		case c.Dilation[a] <= 0:
			return fmt.Errorf("%w: dilation %v must be positive", ErrBadGeometry, c.Dilation)
		case c.Padding[a] < 0:
			return fmt.Errorf("%w: padding %v must be non-negative", ErrBadGeometry, c.Padding)
		}
	}
	if c.Volume() > math.MaxInt32/4 {
		return fmt.Errorf("%w: kernel volume of %v is too large", ErrBadGeometry, c.Kernel)
	}
	return nil
}

// ValidateSubmanifold reports whether c is a valid submanifold geometry:
// odd kernel sizes, stride 1 and padding ⌊K/2⌋·dilation.
func (c Conv) ValidateSubmanifold() error {
	if err := c.Validate(); err != nil {
		return err
	}
	for a := range 3 {
		if c.Kernel[a]%2 == 0 {
			return fmt.Errorf("%w: submanifold convolution needs odd kernel sizes, got %v", ErrBadGeometry, c.Kernel)
		}
	}
	if c != Submanifold(c.Kernel, c.Dilation) {
		return fmt.Errorf("%w: submanifold convolution needs stride 1 and padding K/2·dilation, got stride %v padding %v", ErrBadGeometry, c.Stride, c.Padding)
	}
	return nil
}

// Volume returns the number of taps Kx·Ky·Kz.
func (c Conv) Volume() int { return c.Kernel[0] * c.Kernel[1] * c.Kernel[2] }

// Tap returns the per-axis kernel index (kx, ky, kz) of tap v.
func (c Conv) Tap(v int) [3]int {
	kz := v % c.Kernel[2]
	v /= c.Kernel[2]
	return [3]int{v / c.Kernel[1], v % c.Kernel[1], kz}
}

// TapIndex is the inverse of Tap.
func (c Conv) TapIndex(k [3]int) int { return (k[0]*c.Kernel[1]+k[1])*c.Kernel[2] + k[2] }

// Fine returns the fine coordinate c·stride − padding + k·dilation on axis a.
func (c Conv) Fine(a, coarse, k int) int {
	return coarse*c.Stride[a] - c.Padding[a] + k*c.Dilation[a]
}

// Coarse returns the coarse coordinate whose tap k reaches fine coordinate f
// on axis a, and whether one exists (the division is exact, floor semantics
// for negative values).
func (c Conv) Coarse(a, fine, k int) (int, bool) {
	num := fine + c.Padding[a] - k*c.Dilation[a]
	s := c.Stride[a]
	q := floorDiv(num, s)
	return q, q*s == num
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// StridedExtent returns the output extent of a strided convolution over in,
// as torch.nn.Conv3d defines it: (n + 2P − D·(K−1) − 1)/S + 1 per axis. It
// fails when an axis would be empty.
func (c Conv) StridedExtent(in Extent) (Extent, error) {
	out := Extent{Batch: in.Batch}
	dims := in.Spatial()
	var o [3]int
	for a := range 3 {
		n := dims[a] + 2*c.Padding[a] - c.Dilation[a]*(c.Kernel[a]-1) - 1
		if n < 0 {
			return Extent{}, fmt.Errorf("%w: kernel %v with dilation %v and padding %v does not fit in %v", ErrBadGeometry, c.Kernel, c.Dilation, c.Padding, in)
		}
		o[a] = n/c.Stride[a] + 1
	}
	out.X, out.Y, out.Z = o[0], o[1], o[2]
	return out, nil
}

// TransposedExtent returns the output extent of a transposed convolution
// over in, as torch.nn.ConvTranspose3d defines it (no output padding):
// (n − 1)·S − 2P + D·(K−1) + 1 per axis.
func (c Conv) TransposedExtent(in Extent) (Extent, error) {
	dims := in.Spatial()
	var o [3]int
	for a := range 3 {
		o[a] = (dims[a]-1)*c.Stride[a] - 2*c.Padding[a] + c.Dilation[a]*(c.Kernel[a]-1) + 1
		if o[a] <= 0 {
			return Extent{}, fmt.Errorf("%w: transposed convolution of %v with padding %v is empty", ErrBadGeometry, in, c.Padding)
		}
	}
	return Extent{Batch: in.Batch, X: o[0], Y: o[1], Z: o[2]}, nil
}

// String implements fmt.Stringer for Conv.
func (c Conv) String() string {
	return fmt.Sprintf("Conv{K:%v S:%v P:%v D:%v}", c.Kernel, c.Stride, c.Padding, c.Dilation)
}
