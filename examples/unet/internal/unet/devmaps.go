package unet

import (
	"fmt"
	"slices"

	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// Kernel maps built on the device. On a device that builds kernel maps
// (device.Device.BuildsMaps: the CUDA engine), a batch crosses to the
// device as coordinates only: Prepare computes the voxel coordinates of
// every level on the host (the stride-2 outputs are the distinct halved
// coordinates, cheap to compute), and the training step uploads them and
// builds every map there — no kernel-map table is built on the host or
// uploaded.

// downConv is the down-sampling convolution between levels.
var downConv = grid.Cube(2, 2, 0, 1)

// Levels holds the coordinates ([N, 4] flat, sorted by batch, x, y, z) and
// the grid of every level of a batch.
type Levels struct {
	Coords  [][]int32
	Extents []grid.Extent
}

// levelsOf returns the coordinates and grids of levels levels, level 0
// being coords in ext: level l+1 holds the distinct sites c/2 of level l
// (the outputs of a 2×2×2 stride-2 convolution without padding, in the
// order kmap.NewStrided generates them).
func levelsOf(coords []int32, ext grid.Extent, levels int) (*Levels, error) {
	lv := &Levels{Coords: [][]int32{coords}, Extents: []grid.Extent{ext}}
	for l := 1; l < levels; l++ {
		out, err := downConv.StridedExtent(ext)
		if err != nil {
			return nil, fmt.Errorf("%w: level %d: %v", ErrConfig, l, err)
		}
		coords, ext = coarseCoords(coords, out), out
		lv.Coords = append(lv.Coords, coords)
		lv.Extents = append(lv.Extents, ext)
	}
	return lv, nil
}

// coarseCoords returns the distinct (b, x/2, y/2, z/2) of coords inside
// the coarse grid out (in an odd-sized grid the last plane has no output,
// as in torch's Conv3d), sorted by (b, x, y, z) through their keys in out.
func coarseCoords(coords []int32, out grid.Extent) []int32 {
	n := len(coords) / 4
	keys := make([]uint64, 0, n)
	for i := range n {
		c := coords[4*i : 4*i+4]
		x, y, z := c[1]/2, c[2]/2, c[3]/2
		if int(x) >= out.X || int(y) >= out.Y || int(z) >= out.Z {
			continue
		}
		keys = append(keys, ((uint64(c[0])*uint64(out.X)+uint64(x))*uint64(out.Y)+uint64(y))*uint64(out.Z)+uint64(z))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	res := make([]int32, 0, 4*len(keys))
	for _, k := range keys {
		z := k % uint64(out.Z)
		k /= uint64(out.Z)
		y := k % uint64(out.Y)
		k /= uint64(out.Y)
		x := k % uint64(out.X)
		res = append(res, int32(k/uint64(out.X)), int32(x), int32(y), int32(z))
	}
	return res
}

// BuildMapsOn builds the maps of a batch's levels on device d (which must
// build maps, see device.Device.BuildsMaps) inside its open step: the
// coordinates of every level are uploaded (counted as inputs) and every
// map is built on the device, with the same tables as BuildMaps. The maps
// keep their own copies: they stay usable after the step ends.
func BuildMapsOn(d *device.Device, lv *Levels) (*Maps, error) {
	levels := len(lv.Coords)
	if levels < 1 || len(lv.Extents) != levels {
		return nil, fmt.Errorf("%w: %d levels of coordinates, %d grids", ErrConfig, levels, len(lv.Extents))
	}
	up := make([]sparse.Matrix, levels)
	for l, c := range lv.Coords {
		m, err := d.Upload(sparse.Matrix{Rows: len(c) / 4, Cols: 4, Data: c}, sparse.Int32, device.Inputs)
		if err != nil {
			return nil, fmt.Errorf("unet: uploading the coordinates of level %d: %w", l, err)
		}
		up[l] = m
	}
	mp := &Maps{Sub: make([]*kmap.Map, levels), Down: make([]*kmap.Map, levels), Up: make([]*kmap.Map, levels-1)}
	var err error
	if mp.Head, err = sparse.SubmanifoldMapOf(up[0], lv.Extents[0], [3]int{1, 1, 1}, [3]int{1, 1, 1}); err != nil {
		return nil, err
	}
	for l := range levels {
		if l > 0 {
			if mp.Down[l], err = sparse.StridedMapOf(up[l-1], lv.Extents[l-1], downConv, up[l]); err != nil {
				return nil, err
			}
			if mp.Up[l-1], err = sparse.InverseMapOf(mp.Down[l]); err != nil {
				return nil, err
			}
		}
		if mp.Sub[l], err = sparse.SubmanifoldMapOf(up[l], lv.Extents[l], [3]int{3, 3, 3}, [3]int{1, 1, 1}); err != nil {
			return nil, err
		}
	}
	return mp, nil
}

// deviceMaps builds s's maps on the model's device if s has none yet (a
// sample prepared for a device that builds maps). It must run inside an
// open step.
func (m *Model) deviceMaps(s *Sample) error {
	if s.Maps != nil {
		return nil
	}
	if s.Levels == nil {
		return fmt.Errorf("%w: a sample without maps or coordinates", ErrConfig)
	}
	mp, err := BuildMapsOn(m.Device(), s.Levels)
	if err != nil {
		return err
	}
	s.Maps = mp
	return nil
}
