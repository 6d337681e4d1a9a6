//go:build cudaext

package cudaext

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/serialize"
)

// gxRandomCoords returns n random (not necessarily distinct) sites of ext.
func gxRandomCoords(rng *rand.Rand, ext grid.Extent, n int) []int32 {
	c := make([]int32, 4*n)
	for i := range n {
		c[4*i] = int32(rng.IntN(ext.Batch))
		c[4*i+1] = int32(rng.IntN(ext.X))
		c[4*i+2] = int32(rng.IntN(ext.Y))
		c[4*i+3] = int32(rng.IntN(ext.Z))
	}
	return c
}

// TestGPUSerialize checks z-order and Hilbert codes against package
// serialize bit for bit, decoding back, and the stable sort against
// sparse.SortBy, over extents from 1 voxel to 64-bit codes.
func TestGPUSerialize(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(21, 22))
	exts := []grid.Extent{
		{Batch: 1, X: 1, Y: 1, Z: 1},
		{Batch: 3, X: 5, Y: 9, Z: 2},
		{Batch: 2, X: 64, Y: 64, Z: 64},
		{Batch: 4, X: 1024, Y: 1024, Z: 1024},          // 32 bits: the FlexGEMM z-order overflow case
		{Batch: 2, X: 1 << 21, Y: 3, Z: 1 << 20},       // 3·21 spatial + 1 batch bit = 64
		{Batch: 2, X: 1 << 21, Y: 1 << 21, Z: 1 << 21}, // 64 bits
	}
	for _, ext := range exts {
		for _, mode := range []serialize.Mode{serialize.ZOrder, serialize.Hilbert} {
			t.Run(fmt.Sprintf("%v/%v", ext, mode), func(t *testing.T) {
				for _, n := range []int{0, 1, 1000, 70_000} {
					c := gxRandomCoords(rng, ext, n)
					want := make([]uint64, n)
					require.NoError(t, serialize.Encode(mode, c, ext, want))
					codes, err := e.EncodeCoords(gxCoords(t, e, c), ext, mode)
					require.NoError(t, err)
					require.Equal(t, n, codes.Rows)
					got, err := e.CodesToHost(codes)
					require.NoError(t, err)
					require.Equal(t, want, got)
					back, err := e.DecodeCoords(codes, ext, mode)
					require.NoError(t, err)
					require.Equal(t, c, gxI32(t, e, back))
					// Host codes decode too.
					up, err := e.CodesToDevice(want)
					require.NoError(t, err)
					back2, err := e.DecodeCoords(up, ext, mode)
					require.NoError(t, err)
					require.Equal(t, c, gxI32(t, e, back2))

					ts := &sparse.Tensor{Coords: c, Extent: ext}
					ws, wperm, err := sparse.SortBy(ts, mode)
					require.NoError(t, err)
					sorted, perm, err := e.SortCoords(gxCoords(t, e, c), ext, mode)
					require.NoError(t, err)
					require.Equal(t, ws.Coords, gxI32(t, e, sorted))
					require.Equal(t, wperm, gxI32(t, e, perm))
				}
			})
		}
	}
}

// TestGPUSerializeErrors checks out-of-grid rows and invalid codes.
func TestGPUSerializeErrors(t *testing.T) {
	e := gxEngine(t)
	ext := grid.Extent{Batch: 2, X: 5, Y: 5, Z: 5}
	bad := []int32{0, 1, 1, 1, 1, 4, 4, 4, 1, 4, 5, 0, 2, 0, 0, 0}
	_, err := e.EncodeCoords(gxCoords(t, e, bad), ext, serialize.Hilbert)
	require.ErrorIs(t, err, serialize.ErrOutOfRange)
	require.ErrorIs(t, err, sparse.ErrOutOfRange)
	require.ErrorContains(t, err, "row 2 (1, 4, 5, 0)")
	_, _, err = e.SortCoords(gxCoords(t, e, bad), ext, serialize.ZOrder)
	require.ErrorIs(t, err, sparse.ErrOutOfRange)
	// Code 5·2^9 has batch 5 ≥ 2; code 7·64+... decodes to x = 7 ≥ 5.
	codes := []uint64{0, 5 << 9, serialize.EncodePoint(serialize.ZOrder, 3, 0, 7, 0, 0)}
	up, err := e.CodesToDevice(codes)
	require.NoError(t, err)
	_, err = e.DecodeCoords(up, ext, serialize.ZOrder)
	require.ErrorIs(t, err, serialize.ErrOutOfRange)
	require.ErrorContains(t, err, "at index 1")
	_, err = e.EncodeCoords(gxCoords(t, e, nil), grid.Extent{Batch: 1 << 20, X: 1 << 21, Y: 1, Z: 1}, serialize.ZOrder)
	require.ErrorIs(t, err, serialize.ErrTooLarge)
	_, err = e.EncodeCoords(gxCoords(t, e, nil), ext, serialize.Mode(7))
	require.ErrorIs(t, err, serialize.ErrMode)
}

// TestGPUGatherRows checks the row gather used to apply a permutation.
func TestGPUGatherRows(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(23, 24))
	for _, dt := range []sparse.DType{sparse.Float32, sparse.Float16, sparse.Int32} {
		for _, rows := range []int{0, 1, 300} {
			cols := 5
			perm := make([]int32, rows)
			for i, p := range rng.Perm(rows) {
				perm[i] = int32(p)
			}
			var m sparse.Matrix
			var err error
			if dt == sparse.Int32 {
				d := make([]int32, rows*cols)
				for i := range d {
					d[i] = int32(rng.IntN(1000))
				}
				m, err = e.ToDevice(sparse.Matrix{Rows: rows, Cols: cols, Data: d})
			} else {
				d := make([]float32, rows*cols)
				for i := range d {
					d[i] = float32(rng.IntN(1000)) / 8
				}
				m, err = e.ToDeviceAs(sparse.Matrix{Rows: rows, Cols: cols, Data: d}, dt)
			}
			require.NoError(t, err)
			g, err := e.GatherRows(m, sparse.Matrix{Rows: rows, Cols: 1, Data: perm})
			require.NoError(t, err)
			src, err := e.ToHost(m)
			require.NoError(t, err)
			got, err := e.ToHost(g)
			require.NoError(t, err)
			for j, p := range perm {
				for c := range cols {
					if dt == sparse.Int32 {
						require.Equal(t, src.I32()[int(p)*cols+c], got.I32()[j*cols+c])
					} else {
						require.Equal(t, src.F32()[int(p)*cols+c], got.F32()[j*cols+c])
					}
				}
			}
		}
	}
	m, err := e.ToDevice(sparse.Matrix{Rows: 2, Cols: 1, Data: []float32{1, 2}})
	require.NoError(t, err)
	_, err = e.GatherRows(m, sparse.Matrix{Rows: 2, Cols: 1, Data: []int32{1, 2}})
	require.ErrorIs(t, err, sparse.ErrOutOfRange)
	require.ErrorContains(t, err, "index 1 is 2")
}
