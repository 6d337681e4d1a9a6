package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"codeberg.org/sbinet/npyio"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// readCoordsNpy reads an int32 (or int64) [N, 4] C-order .npy array of
// (batch, x, y, z) rows.
func readCoordsNpy(r io.Reader) ([]int32, error) {
	nr, err := npyio.NewReader(r)
	if err != nil {
		return nil, err
	}
	h := nr.Header.Descr
	if len(h.Shape) != 2 || h.Shape[1] != 4 {
		return nil, fmt.Errorf("coordinate array has shape %v, want [N, 4]", h.Shape)
	}
	if h.Fortran {
		return nil, fmt.Errorf("coordinate array is in Fortran order; save it C-contiguous")
	}
	// npyio keeps the quotes of the header's descr value.
	switch strings.Trim(h.Type, `'"`) {
	case "<i4", "|i4":
		var out []int32
		if err := nr.Read(&out); err != nil {
			return nil, err
		}
		return out, nil
	case "<i8", "|i8":
		var wide []int64
		if err := nr.Read(&wide); err != nil {
			return nil, err
		}
		out := make([]int32, len(wide))
		for i, v := range wide {
			if v < math.MinInt32 || v > math.MaxInt32 {
				return nil, fmt.Errorf("coordinate %d at row %d does not fit in int32", v, i/4)
			}
			out[i] = int32(v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("coordinate array has dtype %s, want int32 (<i4) or int64 (<i8)", strings.Trim(h.Type, `'"`))
}

// fileScene loads a coordinate file and derives its extent: batches
// 0…max b, and each axis 0…max coordinate. Negative values are rejected.
func fileScene(path string) (scene, error) {
	f, err := os.Open(path)
	if err != nil {
		return scene{}, err
	}
	defer f.Close()
	coords, err := readCoordsNpy(f)
	if err != nil {
		return scene{}, fmt.Errorf("%s: %w", path, err)
	}
	if len(coords) == 0 {
		return scene{}, fmt.Errorf("%s: no voxels", path)
	}
	var hi [4]int32
	for i, v := range coords {
		if v < 0 {
			return scene{}, fmt.Errorf("%s: row %d has negative value %d (shift the coordinates first)", path, i/4, v)
		}
		hi[i%4] = max(hi[i%4], v)
	}
	ext := grid.Extent{Batch: int(hi[0]) + 1, X: int(hi[1]) + 1, Y: int(hi[2]) + 1, Z: int(hi[3]) + 1}
	return scene{coords: coords, ext: ext, res: max(ext.X, ext.Y, ext.Z), source: path}, nil
}
