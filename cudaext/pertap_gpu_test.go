//go:build cudaext

package cudaext

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// TestPerTapGathers checks the per-tap gathers (pertap.go): forward with a
// bias and input gradient of the masked split-K algorithm on submanifold
// maps (a shell, a random scene of two batches, a 5×5×5 kernel), every
// tile, f16 and tf32, channels at and above perTapMinChannels (rows of a
// multiple of four columns and not), against the float64 reference and
// within the arithmetic's bound of the masked gather; the same bits on a
// second run; the launches that ran per tap counted (and none for bf16,
// other algorithms, too few channels, a slot buffer over the limit, or
// fewer blocks than perTapMinBlocks).
func TestPerTapGathers(t *testing.T) {
	ok := mapOK(t)
	rng := rand.New(rand.NewPCG(53, 1))
	rext := grid.Extent{Batch: 2, X: 12, Y: 11, Z: 9}
	scenes := append(shellAndRandomScenes(t, rng, rext),
		scene{"random-subm5", ok(kmap.NewSubmanifold(synth.RandomScene(rng, rext, 0.2), rext, [3]int{5, 5, 5}, [3]int{1, 1, 1}))})
	tiles := testTiles(kernels.F16)
	state := func(maxBytes int64) (launches int) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.perTapMaxBytes = maxBytes
			launches = gpu.d.perTapLaunches
			return nil
		}))
		return launches
	}
	setPerTapRules(t, 0, 0) // every gather below sets the limit first (state)
	const unlimited = int64(1) << 40
	for si, sc := range scenes {
		m := sc.m
		for _, ch := range [][2]int{{256, 256}, {264, 258}} {
			ci, co := ch[0], ch[1]
			if si > 0 && ci != 256 {
				continue // odd columns on the shell only
			}
			ref := cpuReference(t, rng, m, ci, co)
			for _, mth := range []kernels.Math{kernels.F16, kernels.TF32, kernels.BF16} {
				gpu.SetTF32(mth == kernels.TF32)
				x, w, b, dy := ref.operands(t, m, dtypeOf(mth))
				for _, tile := range tiles {
					if !tile.Supports(mth) || !envSelected("FLEXGEMM_TEST_TILES", tile.Name()) {
						continue
					}
					if si > 0 && !sampledTile(tiles, tile) {
						continue // the other scenes: the Hopper tiles and one plain tile
					}
					if !tile.ServesTaps(int64(m.V())) {
						continue // the 192-row tile past 27 taps: an error (TestConvSweep)
					}
					name := fmt.Sprintf("%s/ci%d-co%d/%v/%s", sc.name, ci, co, mth, tile.Name())
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}, Tile: tile.Name()}
					run := func() [2][]float32 {
						y, err := gpu.Forward(m, x, w, b, o)
						require.NoError(t, err, name)
						dx, err := gpu.InputGrad(m, dy, w, o)
						require.NoError(t, err, name)
						out := [2][]float32{host(t, y), host(t, dx)}
						gpu.Free(y, dx)
						return out
					}
					before := state(0)
					masked := run()
					require.Equal(t, before, state(unlimited), "%s: limit 0, no gather runs per tap", name)
					got := run()
					n := state(unlimited) - before
					if mth == kernels.BF16 {
						require.Zero(t, n, "%s: bfloat16 keeps the masked gather", name)
						continue
					}
					require.Equal(t, 2, n, "%s: forward and input gradient per tap", name)
					again := run()
					for d, want := range [][]float64{ref.y, ref.dx} {
						e := relL2(got[d], want)
						require.LessOrEqual(t, e, bound(mth), "%s direction %d: error %g against float64", name, d, e)
						e = relL2(got[d], f64(masked[d]))
						require.LessOrEqual(t, e, bound(mth), "%s direction %d: %g from the masked gather", name, d, e)
						requireSameBits(t, got[d], again[d], fmt.Sprintf("%s: direction %d, second run", name, d))
					}
				}
				// Not per tap: another algorithm, too few channels, a limit
				// below the slot buffer.
				if mth != kernels.BF16 && ci == 256 {
					before := state(unlimited)
					for _, alg := range []sparse.Algorithm{sparse.MaskedImplicit, sparse.ImplicitSplitK, sparse.Implicit, sparse.Explicit} {
						y, err := gpu.Forward(m, x, w, b, Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}})
						require.NoError(t, err)
						gpu.Free(y)
					}
					require.Equal(t, before, state(1), "%s %v: only the masked split-K algorithm runs per tap", sc.name, mth)
					y, err := gpu.Forward(m, x, w, b, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}})
					require.NoError(t, err)
					require.Less(t, relL2(host(t, y), ref.y), bound(mth))
					gpu.Free(y)
					require.Equal(t, before, state(unlimited), "%s %v: a slot buffer over the limit keeps the masked gather", sc.name, mth)
				}
				gpu.Free(x, w, b, dy)
			}
			gpu.SetTF32(false)
		}
		// Too few channels.
		small := cpuReference(t, rng, m, 64, 128)
		x, w, b, dy := small.operands(t, m, sparse.Float16)
		before := state(unlimited)
		y, err := gpu.Forward(m, x, w, b, Options{})
		require.NoError(t, err)
		require.Less(t, relL2(host(t, y), small.y), bound(kernels.F16))
		require.Equal(t, before, state(unlimited), "%s: 64 → 128 channels keep the masked gather", sc.name)
		gpu.Free(x, w, b, dy, y)
		// Too few blocks.
		big := cpuReference(t, rng, m, 256, 256)
		x, w, b, dy = big.operands(t, m, sparse.Float16)
		require.NoError(t, gpu.d.do(func() error { gpu.d.perTapMinBlocks = 1 << 40; return nil }))
		y, err = gpu.Forward(m, x, w, b, Options{})
		require.NoError(t, err)
		require.Less(t, relL2(host(t, y), big.y), bound(kernels.F16))
		require.Equal(t, before, state(unlimited), "%s: fewer blocks than perTapMinBlocks keep the masked gather", sc.name)
		require.NoError(t, gpu.d.do(func() error { gpu.d.perTapMinBlocks = 0; return nil }))
		gpu.Free(x, w, b, dy, y)
		gpu.ReleaseMap(m)
	}
}

// TestPerTapGroupedGathers checks the per-tap forwards that run in groups
// of tiles (pertap.go): with the single buffer's limit at 0 and group
// limits of one to eight results, on a shell and on a random scene whose
// taps span several tiles (so that groups split taps), tf32 with a bias,
// rows of a multiple of four columns and not, every Hopper tile and one
// plain tile: the same bits as one group over all slots, within tf32's
// bound of the float64 reference; two and three groups both seen;
// input gradients never in groups (they keep the masked gather at that
// limit); no groups above perTapMaxGroups, below the fewest channels, for
// float16 or bfloat16.
func TestPerTapGroupedGathers(t *testing.T) {
	rng := rand.New(rand.NewPCG(67, 1))
	rext := grid.Extent{Batch: 2, X: 16, Y: 16, Z: 16}
	scenes := shellAndRandomScenes(t, rng, rext)
	tiles := testTiles(kernels.F16)
	const unlimited = int64(1) << 40
	setPerTapRules(t, 0, 0)
	setPerTapGroupRules(t, 0, perTapMinChannels)
	type counts struct{ launches, grouped int }
	// rules sets the single limit and the group limit (in results) and
	// returns the launch counters.
	rules := func(single, outs int64) (c counts) {
		require.NoError(t, gpu.d.do(func() error {
			gpu.d.perTapMaxBytes, gpu.d.perTapGroupOuts = single, outs
			c = counts{gpu.d.perTapLaunches, gpu.d.perTapGroupLaunches}
			return nil
		}))
		return c
	}
	lastGroups := func() (g int64) {
		require.NoError(t, gpu.d.do(func() error { g = gpu.d.perTapLastGroups; return nil }))
		return g
	}
	seen := map[int64]bool{}
	for _, sc := range scenes {
		m := sc.m
		for _, ch := range [][2]int{{256, 256}, {264, 258}} {
			ci, co := ch[0], ch[1]
			ref := cpuReference(t, rng, m, ci, co)
			for _, mth := range []kernels.Math{kernels.F16, kernels.TF32, kernels.BF16} {
				gpu.SetTF32(mth == kernels.TF32)
				x, w, b, dy := ref.operands(t, m, dtypeOf(mth))
				for _, tile := range tiles {
					if !tile.Supports(mth) || !envSelected("FLEXGEMM_TEST_TILES", tile.Name()) || !sampledTile(tiles, tile) {
						continue
					}
					name := fmt.Sprintf("%s/ci%d-co%d/%v/%s", sc.name, ci, co, mth, tile.Name())
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}, Tile: tile.Name()}
					forward := func() []float32 {
						y, err := gpu.Forward(m, x, w, b, o)
						require.NoError(t, err, name)
						defer gpu.Free(y)
						return host(t, y)
					}
					before := rules(unlimited, 0)
					one := forward()
					after := rules(0, 0)
					if mth != kernels.TF32 {
						if mth == kernels.BF16 {
							require.Equal(t, before, after, "%s: bfloat16 keeps the masked gather", name)
						}
						rules(0, 8)
						got := forward()
						require.Equal(t, after, rules(0, 0), "%s: only tf32 runs in groups", name)
						require.LessOrEqual(t, relL2(got, ref.y), bound(mth), "%s: masked against float64", name)
						continue
					}
					require.Equal(t, before.launches+1, after.launches, "%s: one buffer", name)
					require.EqualValues(t, 1, lastGroups(), name)
					require.LessOrEqual(t, relL2(one, ref.y), bound(mth), "%s: one group against float64", name)
					// The slot tiles of this tile height, for the groups
					// each limit should give.
					var slotTiles int64
					require.NoError(t, gpu.d.do(func() error {
						slotTiles = gpu.maps.entries[keyOf(m)].perTap[int64(tile.BM)].tiles
						return nil
					}))
					esz, rowBytes := int64(mth.ElemSize()), int64(co)*int64(mth.ElemSize())
					for outs := int64(1); outs <= 8; outs++ {
						want := perTapGroupsOf(slotTiles, int64(tile.BM)*rowBytes, 0, outs*int64(m.NOut)*int64(co)*esz)
						before := rules(0, outs)
						got := forward()
						after := rules(0, 0)
						if want == 0 {
							require.Equal(t, before, after, "%s: %d results a group: more groups than %d, masked", name, outs, perTapMaxGroups)
							require.LessOrEqual(t, relL2(got, ref.y), bound(mth), "%s: masked against float64", name)
							continue
						}
						g := lastGroups()
						// runPerTap balances the groups' tiles, which may
						// leave fewer groups than perTap counted.
						require.Equal(t, ceilDiv(slotTiles, ceilDiv(slotTiles, want)), g, "%s: %d results a group", name, outs)
						require.Equal(t, before.launches+1, after.launches, name)
						if g > 1 {
							require.Equal(t, before.grouped+1, after.grouped, "%s: counted as grouped", name)
						}
						seen[g] = true
						requireSameBits(t, one, got, fmt.Sprintf("%s: %d groups against one", name, g))
					}
					// Input gradients never in groups.
					before = rules(0, 1)
					dx, err := gpu.InputGrad(m, dy, w, o)
					require.NoError(t, err, name)
					require.LessOrEqual(t, relL2(host(t, dx), ref.dx), bound(mth), name)
					gpu.Free(dx)
					require.Equal(t, before, rules(0, 0), "%s: the input gradient keeps the masked gather", name)
				}
				// Too few channels for groups.
				setPerTapGroupRules(t, 1, int64(ci)+1)
				before := rules(0, 1)
				forward := func() {
					y, err := gpu.Forward(m, x, w, b, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}})
					require.NoError(t, err)
					gpu.Free(y)
				}
				forward()
				require.Equal(t, before, rules(0, 0), "%s %v: %d channels under the fewest for groups", sc.name, mth, ci)
				setPerTapGroupRules(t, 0, perTapMinChannels)
				gpu.Free(x, w, b, dy)
			}
			gpu.SetTF32(false)
		}
		gpu.ReleaseMap(m)
	}
	for g := int64(2); g <= perTapMaxGroups; g++ {
		require.True(t, seen[g], "no gather ran in %d groups (seen: %v)", g, seen)
	}
}

// TestPerTapTablesDroppedByWeightGrad checks dropPerTap: the slot tables
// that a per-tap forward caches with its map are freed at once (the
// allocator's bytes in use fall by their block) and by a weight gradient
// on the map, and the next forward or input gradient builds them again and
// gets the same bits as before the drop.
func TestPerTapTablesDroppedByWeightGrad(t *testing.T) {
	rng := rand.New(rand.NewPCG(59, 1))
	m := shell8Map(t)
	setPerTapRules(t, 1<<40, 0)
	// tables returns the number of cached table sets of m and their bytes,
	// and the allocator's bytes in use.
	tables := func() (sets int, bytes, inUse int64) {
		require.NoError(t, gpu.d.do(func() error {
			if me, ok := gpu.maps.entries[keyOf(m)]; ok {
				for _, pt := range me.perTap {
					sets++
					bytes += pt.buf.size
				}
			}
			inUse = gpu.d.mem.stats.InUse
			return nil
		}))
		return sets, bytes, inUse
	}
	ref := cpuReference(t, rng, m, 256, 256)
	x, w, b, dy := ref.operands(t, m, sparse.Float16)
	defer gpu.Free(x, w, b, dy)
	o := Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}}
	launches := deviceCounter(t, func(d *Device) int { return d.perTapLaunches })
	n0 := launches()
	y, err := gpu.Forward(m, x, w, b, o)
	require.NoError(t, err)
	defer gpu.Free(y)
	dx, err := gpu.InputGrad(m, dy, w, o)
	require.NoError(t, err)
	want := host(t, dx)
	gpu.Free(dx)
	require.Equal(t, 2, launches()-n0, "forward and input gradient per tap")
	sets, size, inUse := tables()
	require.Equal(t, 1, sets, "the forward's tables cached with the map")
	require.Positive(t, size)
	// Dropped, the block goes back at once (no side-stream work pending
	// inside do): bytes in use fall by its size.
	var dropped int64
	require.NoError(t, gpu.d.do(func() error {
		gpu.dropPerTap(m)
		dropped = gpu.d.mem.stats.InUse
		return nil
	}))
	require.Equal(t, inUse-size, dropped)
	y2, err := gpu.Forward(m, x, w, b, o)
	require.NoError(t, err)
	requireSameBits(t, host(t, y), host(t, y2), "forward after the drop")
	gpu.Free(y2)
	sets, _, _ = tables()
	require.Equal(t, 1, sets, "the forward builds the tables again")
	dw, db, err := gpu.ParamGrads(m, x, dy, o)
	require.NoError(t, err)
	sets, _, _ = tables()
	require.Zero(t, sets, "a weight gradient drops the tables")
	require.Less(t, relL2(host(t, dw), ref.dw), bound(kernels.F16))
	gpu.Free(dw, db)
	dx, err = gpu.InputGrad(m, dy, w, o)
	require.NoError(t, err)
	defer gpu.Free(dx)
	require.Equal(t, 4, launches()-n0, "the forward and input gradient per tap again")
	sets, _, _ = tables()
	require.Equal(t, 1, sets, "the input gradient builds the tables again")
	requireSameBits(t, want, host(t, dx), "input gradient after the drop")
}

// TestPerTapBlockBoundBuildsNoPairs checks perTap's bound on the blocks: a
// map too small to fill perTapMinBlocks even with NOut pairs at every tap
// keeps the masked gather without writing pair lists (an inference step
// reads none).
func TestPerTapBlockBoundBuildsNoPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 1))
	m := shell8Map(t)
	// Over the bound of every tile (at most NOut row tiles a tap, 256
	// column tiles of 256 channels).
	setPerTapRules(t, 1<<40, int64(m.V())*int64(m.NOut)*256+1)
	ref := cpuReference(t, rng, m, 256, 256)
	x, w, b, dy := ref.operands(t, m, sparse.Float16)
	defer gpu.Free(x, w, b, dy)
	state := func() (launches int, pairs bool) {
		require.NoError(t, gpu.d.do(func() error {
			launches = gpu.d.perTapLaunches
			if me, ok := gpu.maps.entries[keyOf(m)]; ok {
				pairs = me.pairs != nil
			}
			return nil
		}))
		return launches, pairs
	}
	n0, _ := state()
	y, err := gpu.Forward(m, x, w, b, Options{ConvOptions: sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}})
	require.NoError(t, err)
	defer gpu.Free(y)
	require.Less(t, relL2(host(t, y), ref.y), bound(kernels.F16))
	n, pairs := state()
	require.Equal(t, n0, n, "the masked gather ran")
	require.False(t, pairs, "no pair lists written for a gather that cannot run per tap")
}

// setPerTapRules sets the device's per-tap slot limit and fewest blocks
// for the test, and restores them when it ends.
func setPerTapRules(t *testing.T, maxBytes, minBlocks int64) {
	setDeviceInts(t, []*int64{&gpu.d.perTapMaxBytes, &gpu.d.perTapMinBlocks}, maxBytes, minBlocks)
}

// setPerTapGroupRules sets the device's group limit (in results) and the
// fewest input channels of grouped per-tap forwards for the test, and
// restores them when it ends.
func setPerTapGroupRules(t *testing.T, outs, minChannels int64) {
	setDeviceInts(t, []*int64{&gpu.d.perTapGroupOuts, &gpu.d.perTapGroupMinChannels}, outs, minChannels)
}

// setDeviceInts sets the device fields at fields to values on the worker
// for the test, and restores them when it ends.
func setDeviceInts(t *testing.T, fields []*int64, values ...int64) {
	old := make([]int64, len(fields))
	require.NoError(t, gpu.d.do(func() error {
		for i, f := range fields {
			old[i], *f = *f, values[i]
		}
		return nil
	}))
	t.Cleanup(func() {
		_ = gpu.d.do(func() error {
			for i, f := range fields {
				*f = old[i]
			}
			return nil
		})
	})
}
