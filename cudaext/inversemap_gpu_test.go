//go:build cudaext

package cudaext

// GPU tests of inverse maps built on the device through the package API
// (sparse.InverseMapOf of a strided map built by this engine): equal to
// kmap.NewInverse of the strided map loaded to the host, nothing
// downloaded by the build, a convolution with them equal to the CPU
// engine's with the host inverse, and usable after the coordinates they
// were built from are freed.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// TestGPUInverseMapOf builds strided maps on the GPU from device
// coordinates in both key layouts (narrow: 32-bit keys; wide: more than
// 2^32 sites), with a batch of 3, one voxel and none, frees the
// coordinates, inverts the maps with sparse.InverseMapOf (dispatched to
// this engine by the map's Source: no table is downloaded, the strided
// map stays unloaded), convolves with the inverse on the GPU (forward,
// input and weight gradients against the CPU engine with kmap.NewInverse
// of the CPU strided map), and finally compares the inverse entry for
// entry with kmap.NewInverse of the strided map loaded from the device.
func TestGPUInverseMapOf(t *testing.T) {
	e := gpu
	rng := rand.New(rand.NewPCG(91, 92))
	narrow := grid.Extent{Batch: 3, X: 12, Y: 9, Z: 10}
	wide := grid.Extent{Batch: 3, X: 4000, Y: 3000, Z: 1000}
	require.Equal(t, 32, narrow.KeyBits())
	require.Equal(t, 64, wide.KeyBits())
	corners := func(ext grid.Extent) [][4]int {
		return [][4]int{{0, 0, 0, 0}, {1, ext.X - 5, ext.Y - 5, ext.Z - 5}, {2, ext.X - 3, 0, ext.Z / 2}, {2, ext.X / 2, ext.Y - 4, 0}}
	}
	scenes := []gxScene{
		{"narrow-empty", nil, narrow},
		{"narrow-single", []int32{1, 0, 8, 9}, narrow},
		{"narrow-blobs", gxBlobs(rng, narrow, 6, corners(narrow)), narrow},
		{"wide-empty", nil, wide},
		{"wide-single", []int32{2, 3999, 2999, 999}, wide},
		{"wide-blobs", gxBlobs(rng, wide, 7, corners(wide)), wide},
	}
	for _, sc := range gxScenes(rng) {
		if sc.name == "random-sparse-shuffled" || sc.name == "shell32x2" {
			scenes = append(scenes, sc)
		}
	}
	for _, sc := range scenes {
		for _, conv := range gxStridedConvs {
			if _, err := conv.StridedExtent(sc.ext); err != nil {
				continue
			}
			t.Run(fmt.Sprintf("%s/%v", sc.name, conv), func(t *testing.T) {
				cst, err := kmap.NewStrided(sc.coords, sc.ext, conv, nil)
				require.NoError(t, err)
				cinv, err := kmap.NewInverse(cst)
				require.NoError(t, err)

				dc := gxCoords(t, e, sc.coords)
				st := gxBuild(t, e, func() (*kmap.Map, error) { return sparse.StridedMapOf(dc, sc.ext, conv, sparse.Matrix{}) })
				e.Free(dc) // the maps keep their own copies
				inv := gxBuild(t, e, func() (*kmap.Map, error) { return sparse.InverseMapOf(st) })
				require.False(t, st.Loaded(), "inverting a device map loads nothing")
				require.Equal(t, kmap.Inverse, inv.Kind)
				require.Nil(t, inv.InCoords)
				require.Nil(t, inv.OutCoords)

				// A convolution with the device inverse (the decoder's
				// InverseConv3d) equals the CPU engine's with the host one.
				ref := cpuReference(t, rng, cinv, 5, 7)
				x := dev(t, inv.NIn, ref.ci, ref.x, sparse.Float32)
				w := dev(t, ref.co, inv.V()*ref.ci, ref.w, sparse.Float32)
				b := dev(t, 1, ref.co, ref.b, sparse.Float32)
				dy := dev(t, inv.NOut, ref.co, ref.dy, sparse.Float32)
				for _, alg := range []sparse.Algorithm{sparse.Explicit, sparse.Implicit, sparse.MaskedImplicit} {
					opt := sparse.ConvOptions{Algorithm: alg}
					y, err := sparse.Conv(inv, x, w, b, opt)
					require.NoError(t, err)
					dx, err := sparse.ConvInputGrad(inv, dy, w, opt)
					require.NoError(t, err)
					dw, err := sparse.ConvWeightGrad(inv, x, dy, opt)
					require.NoError(t, err)
					require.LessOrEqual(t, relL2(host(t, y), ref.y), bound(kernels.F32), "%v forward", alg)
					require.LessOrEqual(t, relL2(host(t, dx), ref.dx), bound(kernels.F32), "%v input grad", alg)
					require.LessOrEqual(t, relL2(host(t, dw), ref.dw), bound(kernels.F32), "%v weight grad", alg)
					e.Free(y, dx, dw)
				}
				e.Free(x, w, b, dy)
				require.False(t, inv.Loaded(), "convolving on the device loads no host table")
				require.False(t, st.Loaded())

				// Entry for entry: the inverse of the loaded strided map.
				gxLoad(t, e, st)
				hinv, err := kmap.NewInverse(st)
				require.NoError(t, err)
				gxSameMap(t, e, st, cst)
				gxSameMap(t, e, inv, hinv)
				gxSameMap(t, e, inv, cinv)
				gxSameDerived(t, e, inv, cinv)

				// The inverse of the loaded map is built on the device too
				// and aliases the strided map's host coordinates.
				again := gxBuild(t, e, func() (*kmap.Map, error) { return sparse.InverseMapOf(st) })
				if st.NIn > 0 && st.NOut > 0 {
					require.Same(t, &st.InCoords[0], &again.OutCoords[0])
					require.Same(t, &st.OutCoords[0], &again.InCoords[0])
				}
				gxSameMap(t, e, again, cinv)

				// The device tables are copies: releasing the strided map
				// leaves its inverse usable, and the other way round.
				e.ReleaseMap(st)
				oc, err := e.OutCoords(again)
				require.NoError(t, err)
				require.True(t, slices.Equal(cinv.OutCoords, gxI32(t, e, oc)), "OutCoords after the strided map's release")
				e.Free(oc)
				dn, dr := gxDeviceTables(t, e, again)
				require.True(t, slices.Equal(cinv.Nbr, dn), "Nbr after the strided map's release differs at %d", firstDiff(cinv.Nbr, dn))
				require.True(t, slices.Equal(cinv.Reverse(), dr), "Rev after the strided map's release differs at %d", firstDiff(cinv.Reverse(), dr))
			})
		}
	}
}

// TestGPUInverseMapOfErrors: bad maps give kmap.NewInverse's errors
// through the package API, and a released strided map cannot be inverted.
func TestGPUInverseMapOfErrors(t *testing.T) {
	e := gpu
	ext := grid.Extent{Batch: 1, X: 6, Y: 6, Z: 6}
	dc := gxCoords(t, e, []int32{0, 1, 1, 1, 0, 2, 2, 2})
	defer e.Free(dc)
	sm, err := sparse.SubmanifoldMapOf(dc, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	_, err = sparse.InverseMapOf(sm)
	require.ErrorIs(t, err, kmap.ErrMap)
	require.ErrorIs(t, err, sparse.ErrShape)
	require.ErrorContains(t, err, "needs a strided map")
	require.False(t, sm.Loaded(), "the kind is checked without loading")
	_, err = sparse.InverseMapOf(nil)
	require.ErrorIs(t, err, kmap.ErrMap)
	st, err := sparse.StridedMapOf(dc, ext, grid.Cube(2, 2, 0, 1), sparse.Matrix{})
	require.NoError(t, err)
	e.ReleaseMap(st)
	_, err = sparse.InverseMapOf(st)
	require.ErrorIs(t, err, ErrReleased)
}
