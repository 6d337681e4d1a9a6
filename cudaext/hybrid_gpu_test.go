//go:build cudaext

package cudaext

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
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// TestHybridGathers checks the hybrid tf32 forward gathers (hybrid.go):
// shares of a quarter, a half and all of a tile's rows, the masked and
// masked split-K algorithms, on a shell and a random scene (host maps)
// and a shell whose map is built on the GPU,
// every Hopper tile and one plain tile, rows of a multiple of four columns
// and not: forwards within tf32's bound of the float64 reference and of
// the masked gather, input gradients of the reference, the same bits on a
// second run, one hybrid launch a gather, sparse pairs moved at a share of
// 1; float16 never hybrid; the tables made again when the share changes.
func TestHybridGathers(t *testing.T) {
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(73, 1))
	rext := grid.Extent{Batch: 2, X: 12, Y: 11, Z: 9}
	scenes := shellAndRandomScenes(t, rng, rext)
	tiles := testTiles(kernels.TF32)
	setPerTapRules(t, 0, 0) // the masked gathers, not per tap
	setPerTapGroupRules(t, 0, perTapMinChannels)
	share := func(s float64) (launches int) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.hybridShare = s
			launches = gpu.d.hybridLaunches
			return nil
		}))
		return launches
	}
	t.Cleanup(func() { share(0) })
	moved := false
	for _, sc := range scenes {
		m := sc.m
		for _, ch := range [][2]int{{256, 256}, {264, 258}} {
			ci, co := ch[0], ch[1]
			ref := cpuReference(t, rng, m, ci, co)
			gpu.SetTF32(true)
			x, w, b, dy := ref.operands(t, m, sparse.Float32)
			for _, tile := range tiles {
				if !tile.Supports(kernels.TF32) || !envSelected("FLEXGEMM_TEST_TILES", tile.Name()) || !sampledTile(tiles, tile) {
					continue
				}
				for _, alg := range []sparse.Algorithm{sparse.MaskedImplicitSplitK, sparse.MaskedImplicit} {
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}, Tile: tile.Name()}
					forward := func() []float32 {
						y, err := gpu.Forward(m, x, w, b, o)
						require.NoError(t, err)
						defer gpu.Free(y)
						return host(t, y)
					}
					share(0)
					masked := forward()
					for _, s := range []float64{0.25, 0.5, 1} {
						name := fmt.Sprintf("%s/ci%d-co%d/%s/%v/share %g", sc.name, ci, co, tile.Name(), alg, s)
						before := share(s)
						got := forward()
						require.Equal(t, before+1, share(s), "%s: one hybrid launch", name)
						require.LessOrEqual(t, relL2(got, ref.y), bound(kernels.TF32), "%s: against float64", name)
						require.LessOrEqual(t, relL2(got, f64(masked)), bound(kernels.TF32), "%s: against the masked gather", name)
						requireSameBits(t, got, forward(), name+": second run")
						var sparsePairs bool
						require.NoError(t, gpu.d.do(func() error {
							h := gpu.maps.entries[keyOf(m)].hybrid[int64(tile.BM)]
							sparsePairs = h != nil && h.sparse != nil
							return nil
						}))
						if s == 1 {
							require.True(t, sparsePairs, "%s: a share of 1 moves the taps some row of a tile lacks", name)
							moved = true
						}
						// The input gradient: hybrid too, through the same
						// tables with mirrored weight taps.
						dgrad := func() []float32 {
							dx, err := gpu.InputGrad(m, dy, w, o)
							require.NoError(t, err, name)
							defer gpu.Free(dx)
							return host(t, dx)
						}
						before = share(s)
						dx := dgrad()
						require.Equal(t, before+1, share(s), "%s: the input gradient is hybrid", name)
						require.LessOrEqual(t, relL2(dx, ref.dx), bound(kernels.TF32), "%s: input gradient against float64", name)
						requireSameBits(t, dx, dgrad(), name+": input gradient, second run")
					}
				}
			}
			gpu.Free(x, w, b, dy)
			gpu.SetTF32(false)
			// float16 is not hybrid.
			x16, w16, b16, dy16 := ref.operands(t, m, sparse.Float16)
			before := share(1)
			y, err := gpu.Forward(m, x16, w16, b16, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}})
			require.NoError(t, err)
			require.LessOrEqual(t, relL2(host(t, y), ref.y), bound(kernels.F16))
			require.Equal(t, before, share(0), "%s: float16 is not hybrid", sc.name)
			gpu.Free(x16, w16, b16, dy16, y)
		}
		gpu.ReleaseMap(m)
	}
	require.True(t, moved)

	// A map built on the GPU (its Gray order and masks made there, no host
	// tables): hybrid too, against the float64 reference of the same map
	// built on the host (the same rows).
	coords, ext := synth.SphereShell(16, 1)
	hm := ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))
	gm := gxBuild(t, gpu, func() (*kmap.Map, error) {
		return gpu.SubmanifoldMap(gxCoords(t, gpu, coords), ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	})
	ref := cpuReference(t, rng, hm, 128, 136)
	gpu.SetTF32(true)
	defer gpu.SetTF32(false)
	x, w, b, dy := ref.operands(t, hm, sparse.Float32)
	defer gpu.Free(x, w, b, dy)
	for _, s := range []float64{0.5, 1} {
		o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}
		before := share(s)
		y, err := gpu.Forward(gm, x, w, b, o)
		require.NoError(t, err)
		dx, err := gpu.InputGrad(gm, dy, w, o)
		require.NoError(t, err)
		require.Equal(t, before+2, share(s), "GPU map, share %g: forward and input gradient hybrid", s)
		require.LessOrEqual(t, relL2(host(t, y), ref.y), bound(kernels.TF32), "GPU map, share %g: forward", s)
		require.LessOrEqual(t, relL2(host(t, dx), ref.dx), bound(kernels.TF32), "GPU map, share %g: input gradient", s)
		gpu.Free(y, dx)
	}
	gpu.ReleaseMap(gm)
}

// TestHybridTables checks the hybrid split built on the device
// (masks_hybrid_*) entry for entry against kmap.Masked.Hybrid on the host
// over the same Gray order: the dense tile tables, the sparse taps' tile
// layout, every slot's input row and every (row, tap)'s slot (−1
// elsewhere), the per-tap tile tables and the row list; for tiles of 64,
// 128 and 256 rows (a partial last tile), shares from a tenth to all of a
// tile's rows, on a shell and a random scene.
func TestHybridTables(t *testing.T) {
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(79, 3))
	rext := grid.Extent{Batch: 2, X: 15, Y: 13, Z: 11}
	coords, ext := synth.SphereShell(24, 1)
	scenes := []scene{
		{"shell24-subm3", ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))},
		{"random-subm3", ok(kmap.NewSubmanifold(synth.RandomScene(rng, rext, 0.3), rext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))},
	}
	t.Cleanup(func() {
		require.NoError(t, gpu.d.do(func() error { gpu.d.hybridShare = 0; return nil }))
	})
	for _, sc := range scenes {
		m := sc.m
		n, V := m.NOut, m.V()
		mask := make([]uint64, n)
		for r := range n {
			for k := range V {
				if m.Nbr[r*V+k] >= 0 {
					mask[r] |= 1 << k
				}
			}
		}
		for _, bm := range []int{64, 128, 256} {
			for _, share := range []float64{0.1, 0.5, 0.75, 1} {
				name := fmt.Sprintf("%s/bm%d/share %g", sc.name, bm, share)
				var order, seg, taps, tbl, slot, tseg, ttap, rows []int32
				var first []int64
				require.NoError(t, gpu.d.do(func() error {
					gpu.d.hybridShare = share
					h, err := gpu.hybridTablesFor(m, int64(bm))
					if err != nil {
						return err
					}
					defer gpu.freeHybrid(h)
					if err := gpu.finishHybrid(m, h); err != nil {
						return err
					}
					g, err := gpu.grayTablesFor(m, false)
					if err != nil {
						return err
					}
					nt := (n + bm - 1) / bm
					if order, err = download[int32](gpu.d, g.order.ptr, n); err != nil {
						return err
					}
					if seg, err = download[int32](gpu.d, h.dense.seg.ptr, nt+1); err != nil {
						return err
					}
					if taps, err = download[int32](gpu.d, h.dense.taps.ptr, int(seg[nt])); err != nil {
						return err
					}
					pt := h.sparse
					if pt == nil {
						return nil
					}
					first = pt.firstTile
					for _, d := range []struct {
						dst *[]int32
						p   devPtr
						n   int64
					}{
						{&tbl, pt.tbl, pt.rows}, {&slot, pt.slot, int64(n * V)}, {&tseg, pt.seg, pt.tiles + 1},
						{&ttap, pt.taps, pt.tiles}, {&rows, pt.rowList, pt.listed},
					} {
						if *d.dst, err = download[int32](gpu.d, d.p, int(d.n)); err != nil {
							return err
						}
					}
					return nil
				}))
				ms := &kmap.Masked{V: V, Words: 1, Mask: mask, Order: order}
				want := ms.Hybrid(bm, share)
				require.Equal(t, want.Dense.Seg, seg, "%s: dense tile segments", name)
				require.Equal(t, want.Dense.Taps, taps, "%s: dense taps", name)
				if len(want.Sparse) == 0 {
					require.Nil(t, first, "%s: no sparse pairs, no slot tables", name)
					continue
				}
				pairs := make([]int64, V)
				for k := range V {
					pairs[k] = want.TapSeg[k+1] - want.TapSeg[k]
				}
				wantFirst := tapFirstTiles(pairs, int64(bm))
				require.Equal(t, wantFirst, first, "%s: the sparse taps' first tiles", name)
				wantTbl := slices.Repeat([]int32{-1}, int(wantFirst[V])*bm)
				wantSlot := slices.Repeat([]int32{-1}, n*V)
				listed := make([]bool, n)
				for k := range V {
					for i, r := range want.Sparse[want.TapSeg[k]:want.TapSeg[k+1]] {
						s := wantFirst[k]*int64(bm) + int64(i)
						wantTbl[s] = m.Nbr[int(r)*V+k]
						wantSlot[int(r)*V+k] = int32(s)
						listed[r] = true
					}
				}
				require.Equal(t, wantTbl, tbl, "%s: the slots' input rows", name)
				require.Equal(t, wantSlot, slot, "%s: the (row, tap) slots", name)
				var wantRows []int32
				for _, r := range order {
					if listed[r] {
						wantRows = append(wantRows, r)
					}
				}
				require.Equal(t, wantRows, rows, "%s: the rows that hold sparse pairs, in the order's order", name)
				for tl := range wantFirst[V] {
					require.Equal(t, int32(tl), tseg[tl], "%s: per-tap tile segments", name)
					require.Equal(t, int32(tapOfTile(wantFirst, tl)), ttap[tl], "%s: tile %d's tap", name, tl)
				}
				require.Equal(t, int32(wantFirst[V]), tseg[wantFirst[V]], name)
			}
		}
		gpu.ReleaseMap(m)
	}
}
