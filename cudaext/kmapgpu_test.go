//go:build cudaext

package cudaext

import (
	"cmp"
	"errors"
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

// gxDeviceTables downloads the cached device Nbr and Rev of m (the reverse
// table of a submanifold map is derived here if no one asked for it yet).
func gxDeviceTables(t testing.TB, e *Engine, m *kmap.Map) (nbr, rev []int32) {
	t.Helper()
	V := m.V()
	require.NoError(t, e.d.do(func() error {
		me := e.entry(m)
		if !me.haveNbr {
			return fmt.Errorf("map Nbr not cached")
		}
		var err error
		if nbr, err = download[int32](e.d, me.nbr.ptr, m.NOut*V); err != nil {
			return err
		}
		rp, err := e.revTable(m)
		if err != nil {
			return err
		}
		rev, err = download[int32](e.d, rp, m.NIn*V)
		return err
	}))
	return nbr, rev
}

// gxBuild runs a GPU map build and checks that it downloaded none of the
// map's tables: at most a few status words and counts (hash status,
// unique count) come back.
func gxBuild(t testing.TB, e *Engine, build func() (*kmap.Map, error)) *kmap.Map {
	t.Helper()
	before := e.HostWaits()
	m, err := build()
	require.NoError(t, err)
	after := e.HostWaits()
	require.LessOrEqual(t, after.DownloadBytes-before.DownloadBytes, int64(256), "a map build downloads only status words")
	require.LessOrEqual(t, after.Downloads-before.Downloads, int64(8))
	require.Equal(t, kmap.TableSource(e.src), m.Source)
	require.Nil(t, m.Nbr, "the host table is not downloaded by the build")
	return m
}

// gxLoad loads the host tables of a GPU-built map and checks that exactly
// the missing tables were downloaded, once.
func gxLoad(t testing.TB, e *Engine, m *kmap.Map) {
	t.Helper()
	if m.Loaded() {
		return
	}
	var want int64
	if m.InCoords == nil {
		want += int64(m.NIn) * 16
	}
	if m.OutCoords == nil && !(m.Kind == kmap.Submanifold && m.InCoords == nil) {
		want += int64(m.NOut) * 16
	}
	if m.Nbr == nil {
		want += int64(m.NOut) * int64(m.V()) * 4
	}
	before := e.HostWaits()
	require.NoError(t, m.Load())
	require.True(t, m.Loaded())
	require.NoError(t, m.Load())
	after := e.HostWaits()
	require.Equal(t, want, after.DownloadBytes-before.DownloadBytes, "Load downloads the missing tables once")
	if m.Kind == kmap.Submanifold && m.NIn > 0 {
		require.Same(t, &m.InCoords[0], &m.OutCoords[0], "a submanifold map's coordinates are one array")
	}
}

// gxWaitsSince returns the host waits between two readings.
func gxWaitsSince(before, after HostWaits) HostWaits {
	return HostWaits{Waits: after.Waits - before.Waits, Downloads: after.Downloads - before.Downloads,
		DownloadBytes: after.DownloadBytes - before.DownloadBytes}
}

// gxSameMap checks a GPU-built map against the CPU one: every field, the
// host tables (loaded here: the build leaves them on the device) and
// device tables, and the device reverse table against cpu.Reverse().
func gxSameMap(t *testing.T, e *Engine, gpu, cpu *kmap.Map) {
	t.Helper()
	require.Equal(t, cpu.Kind, gpu.Kind)
	require.Equal(t, cpu.Conv, gpu.Conv)
	require.Equal(t, cpu.In, gpu.In)
	require.Equal(t, cpu.Out, gpu.Out)
	require.Equal(t, cpu.NIn, gpu.NIn)
	require.Equal(t, cpu.NOut, gpu.NOut)
	// The device coordinates (what OutCoords copies) equal the CPU's too.
	oc, err := e.OutCoords(gpu)
	require.NoError(t, err)
	require.True(t, slices.Equal(cpu.OutCoords, gxI32(t, e, oc)), "device OutCoords differ")
	e.Free(oc)
	gxLoad(t, e, gpu)
	require.Equal(t, len(cpu.InCoords), len(gpu.InCoords))
	require.True(t, slices.Equal(cpu.InCoords, gpu.InCoords), "InCoords differ")
	require.True(t, slices.Equal(cpu.OutCoords, gpu.OutCoords), "OutCoords differ")
	require.Equal(t, len(cpu.Nbr), len(gpu.Nbr))
	require.True(t, slices.Equal(cpu.Nbr, gpu.Nbr), "Nbr differs at %d", firstDiff(cpu.Nbr, gpu.Nbr))
	require.NoError(t, gpu.Validate())
	dn, dr := gxDeviceTables(t, e, gpu)
	require.True(t, slices.Equal(cpu.Nbr, dn), "device Nbr differs at %d", firstDiff(cpu.Nbr, dn))
	rev := cpu.Reverse()
	require.True(t, slices.Equal(rev, dr), "device Rev differs at %d", firstDiff(rev, dr))
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// gxSameDerived derives every device table of gpu and compares them with
// the CPU's pair lists, Gray orders and tile unions of cpu. (Downloads run
// on the worker; require only runs on the test goroutine.) Deriving waits
// for nothing and touches no host table of gpu; writing the pair lists
// then waits once, for their counts.
func gxSameDerived(t *testing.T, e *Engine, gpu, cpu *kmap.Map) {
	t.Helper()
	loaded := gpu.Loaded()
	p := cpu.Pairs()
	V := cpu.V()
	var hadPairs bool
	require.NoError(t, e.d.do(func() error { hadPairs = e.entry(gpu).pairs != nil; return nil }))
	before := e.HostWaits()
	// The first tile height's unions from the Gray tables' masks, the
	// others' from masks rebuilt after a convolution dropped them
	// (dropMasks, maskedTablesFor).
	hs := tileHeights()
	require.NoError(t, e.DeriveTables(gpu, TablesAll, hs[0]))
	require.NoError(t, e.d.do(func() error { e.dropMasks(gpu, false); e.dropMasks(gpu, true); return nil }))
	require.NoError(t, e.DeriveTables(gpu, TablesAll, hs...))
	after := e.HostWaits()
	require.Equal(t, loaded, gpu.Loaded(), "DeriveTables loads no host table")
	// A submanifold map's lists hold the taps before the centre (the
	// weight gradient reads them mirrored, see TablePairs).
	taps := V
	if gpu.Kind == kmap.Submanifold {
		taps = (V - 1) / 2
	}
	require.Equal(t, HostWaits{}, gxWaitsSince(before, after), "deriving waits for nothing")
	require.NoError(t, e.DeriveTables(gpu, TablesAll, tileHeights()...))
	require.Equal(t, after, e.HostWaits(), "cached tables are not derived again")
	var maxPairs int64
	lens := make([]int64, V)
	for v := range V {
		lens[v] = p.Seg[v+1] - p.Seg[v]
		maxPairs = max(maxPairs, lens[v])
	}
	listed := p.Seg[taps] // pairs of the listed taps
	// sched: the tiles' launch order in gathers of each arithmetic of
	// scheduleMaths (nil for index order).
	type maskedHost struct {
		order, seg, taps []int32
		sched            [2][]int32
	}
	var seg []int64
	var in, out []int32
	got := map[maskKey]maskedHost{}
	var written HostWaits
	var pending bool
	require.NoError(t, e.d.do(func() error {
		me := e.entry(gpu)
		pb := me.pairs
		if pb == nil {
			return fmt.Errorf("pairs not cached")
		}
		pending = pb.copy != nil
		w0 := e.HostWaits()
		if _, err := e.pairTables(gpu); err != nil {
			return err
		}
		written = gxWaitsSince(w0, e.HostWaits())
		if pb.st.longest != maxPairs {
			return fmt.Errorf("longest pair segment %d, want %d", pb.st.longest, maxPairs)
		}
		if gpu.NOut > 0 && !slices.Equal(pb.st.iters, lens) {
			return fmt.Errorf("pair segment lengths %v, want %v", pb.st.iters, lens)
		}
		if pb.half != (gpu.Kind == kmap.Submanifold) {
			return fmt.Errorf("half pair lists %v for a %v map", pb.half, gpu.Kind)
		}
		var err error
		if seg, err = download[int64](e.d, pb.seg.ptr, taps+1); err != nil {
			return err
		}
		if in, err = download[int32](e.d, pb.in.ptr, int(listed)); err != nil {
			return err
		}
		if out, err = download[int32](e.d, pb.out.ptr, int(listed)); err != nil {
			return err
		}
		// The chunk offsets: tap v's pairs of the output rows before chunk
		// c start at off[v·nc + c] (the lists are in output-row order).
		if nc := (gpu.NOut + pairsChunk - 1) / pairsChunk; listed > 0 {
			if pb.off.ptr == 0 {
				return fmt.Errorf("no chunk offsets for %d listed pairs", listed)
			}
			off, err := download[int64](e.d, pb.off.ptr, taps*nc)
			if err != nil {
				return err
			}
			for v := range taps {
				want := seg[v]
				for c := range nc {
					for want < seg[v+1] && int(out[want]) < c*pairsChunk {
						want++
					}
					if off[v*nc+c] != want {
						return fmt.Errorf("tap %d chunk %d: first pair %d, want %d", v, c, off[v*nc+c], want)
					}
				}
			}
		} else if pb.off.ptr != 0 {
			return fmt.Errorf("chunk offsets for empty pair lists")
		}
		for _, reverse := range []bool{false, true} {
			rows := cpu.NOut
			if reverse {
				rows = cpu.NIn
			}
			for _, th := range tileHeights() {
				// A submanifold map's masked input gradient reads the
				// forward tables: its reverse ones are derived here.
				if _, ok := me.tiles[maskKey{reverse, th}]; !ok && !(reverse && gpu.Kind == kmap.Submanifold) {
					return fmt.Errorf("tile tables (reverse %v, rows %d) not cached", reverse, th)
				}
				mt, err := e.maskedTablesFor(gpu, reverse, th)
				if err != nil {
					return err
				}
				var h maskedHost
				nt := (rows + th - 1) / th
				if h.order, err = download[int32](e.d, mt.order, rows); err != nil {
					return err
				}
				if h.seg, err = download[int32](e.d, mt.tiles.seg.ptr, nt+1); err != nil {
					return err
				}
				if h.taps, err = download[int32](e.d, mt.tiles.taps.ptr, int(h.seg[nt])); err != nil {
					return err
				}
				for i, mth := range scheduleMaths {
					sp, err := e.d.tileSchedule(mt.tiles, mt.order, rows, gpu.V(), th, mth)
					if err != nil {
						return err
					}
					if sched := e.d.longestFirst(int64(nt), mth) || e.d.rowsFirst(int64(nt), int64(rows), mth); nt > 0 && sched != (sp != 0) {
						return fmt.Errorf("reverse %v, rows %d, %v: %d tiles with a schedule %v", reverse, th, mth, nt, sp != 0)
					}
					if sp != 0 {
						if h.sched[i], err = download[int32](e.d, sp, nt); err != nil {
							return err
						}
					}
				}
				got[maskKey{reverse, th}] = h
			}
		}
		return nil
	}))
	if !hadPairs && gpu.NOut > 0 && taps > 0 {
		require.True(t, pending, "DeriveTables counts the pair lists and leaves their writing to the first use")
	}
	if written != (HostWaits{}) {
		// The device had not passed the copy of the segments yet.
		require.True(t, pending)
		require.Equal(t, HostWaits{Waits: 1, Downloads: 1, DownloadBytes: int64(taps+1) * 8}, written, "writing the counted pair lists waits at most once, for their segments")
	}
	require.Equal(t, p.Seg[:taps+1], seg)
	require.True(t, slices.Equal(p.In[:listed], in), "pair inputs differ at %d", firstDiff(p.In[:listed], in))
	require.True(t, slices.Equal(p.Out[:listed], out), "pair outputs differ at %d", firstDiff(p.Out[:listed], out))
	if gpu.Kind == kmap.Submanifold {
		// What the mirrored reading assumes, on the CPU's own lists: tap
		// V−1−v holds tap v's pairs swapped (as sets) and the centre is
		// the identity.
		for v := range taps {
			a, b := p.Seg[v], p.Seg[v+1]
			c, d := p.Seg[V-1-v], p.Seg[V-v]
			require.Equal(t, b-a, d-c, "tap %d and its mirror", v)
			fwd, mir := map[[2]int32]bool{}, map[[2]int32]bool{}
			for k := a; k < b; k++ {
				fwd[[2]int32{p.In[k], p.Out[k]}] = true
			}
			for k := c; k < d; k++ {
				mir[[2]int32{p.Out[k], p.In[k]}] = true
			}
			require.Equal(t, fwd, mir, "tap %d: mirror tap %d holds its pairs swapped", v, V-1-v)
		}
		for k := p.Seg[taps]; k < p.Seg[taps+1]; k++ {
			require.Equal(t, p.In[k], p.Out[k], "centre pair %d is the identity", k)
		}
		require.Equal(t, int64(gpu.NOut), p.Seg[taps+1]-p.Seg[taps], "the centre pairs every row")
	}
	for _, reverse := range []bool{false, true} {
		ms := cpu.Masked()
		if reverse {
			ms = cpu.ReverseMasked()
		}
		for _, th := range tileHeights() {
			h := got[maskKey{reverse, th}]
			require.True(t, slices.Equal(ms.Order, h.order), "reverse %v: Gray order differs at %d", reverse, firstDiff(ms.Order, h.order))
			tl := ms.Tiles(th)
			require.True(t, slices.Equal(tl.Seg, h.seg), "reverse %v rows %d: tile segments differ at %d", reverse, th, firstDiff(tl.Seg, h.seg))
			require.True(t, slices.Equal(tl.Taps, h.taps), "reverse %v rows %d: tile taps differ at %d", reverse, th, firstDiff(tl.Taps, h.taps))
			for i, mth := range scheduleMaths {
				if h.sched[i] == nil {
					continue
				}
				want := longestTilesFirst(tl.Seg)
				if !e.d.longestFirst(int64(len(tl.Seg)-1), mth) {
					want = tilesByFirstRow(ms.Order, th)
				}
				require.True(t, slices.Equal(want, h.sched[i]), "reverse %v rows %d %v: tile schedule differs at %d", reverse, th, mth, firstDiff(want, h.sched[i]))
			}
		}
	}
}

// scheduleMaths are the arithmetics whose tile launch orders gxSameDerived
// checks: 16-bit and tf32 gathers have bounds of their own
// (Device.longestFirst).
var scheduleMaths = [...]kernels.Math{kernels.F16, kernels.TF32}

// tilesByFirstRow is Device.tileSchedule's launch order by rows (Device.rowsFirst)
// on the host: the tiles of rows consecutive entries of order by their
// first entry, ties in index order.
func tilesByFirstRow(order []int32, rows int) []int32 {
	nt := (len(order) + rows - 1) / rows
	s := make([]int32, nt)
	for i := range s {
		s[i] = int32(i)
	}
	slices.SortStableFunc(s, func(a, b int32) int { return cmp.Compare(order[int(a)*rows], order[int(b)*rows]) })
	return s
}

// longestTilesFirst is tileUnions' launch order on the host: the tiles of
// the tap segments seg by descending tap count, ties in index order.
func longestTilesFirst(seg []int32) []int32 {
	order := make([]int32, len(seg)-1)
	for i := range order {
		order[i] = int32(i)
	}
	count := func(t int32) int32 { return seg[t+1] - seg[t] }
	slices.SortStableFunc(order, func(a, b int32) int { return int(count(b) - count(a)) })
	return order
}

var gxSubmKernels = []struct{ k, d [3]int }{
	{[3]int{3, 3, 3}, [3]int{1, 1, 1}},
	{[3]int{3, 3, 3}, [3]int{2, 1, 3}},
	{[3]int{1, 1, 1}, [3]int{1, 1, 1}},
	{[3]int{3, 1, 5}, [3]int{1, 1, 1}}, // V = 15
	{[3]int{3, 3, 5}, [3]int{1, 1, 1}}, // V = 45: 64-bit ranks
	{[3]int{5, 5, 5}, [3]int{1, 1, 1}}, // V = 125: two mask words
}

// TestGPUSubmanifoldMapLarge compares with kmap.NewSubmanifold a
// submanifold map of more than kmap.BalancedKeyMaxRows rows, whose Gray
// key reads the taps in table order: from the ranks that the brick search
// writes with the table, and from masks_build's masks without it.
func TestGPUSubmanifoldMapLarge(t *testing.T) {
	e := gxEngine(t)
	coords, ext := synth.SphereShell(256, 1)
	require.Greater(t, len(coords)/4, max(kmap.BalancedKeyMaxRows, brickMinRows))
	// Its tiles of the smallest height launch by their first rows with
	// the threshold lowered (gxSameDerived checks that schedule).
	require.NoError(t, e.d.do(func() error { e.d.rowsFirstMin = 0; return nil }))
	defer func() { require.NoError(t, e.d.do(func() error { e.d.rowsFirstMin = rowsFirstMinRows; return nil })) }()
	n := int64(len(coords) / 4)
	require.True(t, e.d.rowsFirst(ceilDiv(n, int64(tileHeights()[0])), n, kernels.F16), "no rows-first schedule")
	cpu, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	for _, bricks := range []bool{true, false} {
		t.Run(fmt.Sprintf("bricks=%v", bricks), func(t *testing.T) {
			require.NoError(t, e.d.do(func() error { e.d.noBricks = !bricks; return nil }))
			defer func() { require.NoError(t, e.d.do(func() error { e.d.noBricks = false; return nil })) }()
			gpu := gxBuild(t, e, func() (*kmap.Map, error) {
				return e.SubmanifoldMap(gxCoords(t, e, coords), ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
			})
			gxSameDerived(t, e, gpu, cpu)
		})
	}
}

// TestGPUSubmanifoldMap compares GPU submanifold maps (tables, reverse,
// pairs, masks, tiles) with kmap.NewSubmanifold on every scene.
func TestGPUSubmanifoldMap(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, sc := range gxScenes(rng) {
		for _, g := range gxSubmKernels {
			if g.k == [3]int{5, 5, 5} && len(sc.coords) > 4*20000 {
				continue
			}
			t.Run(fmt.Sprintf("%s/k%v/d%v", sc.name, g.k, g.d), func(t *testing.T) {
				cpu, err := kmap.NewSubmanifold(sc.coords, sc.ext, g.k, g.d)
				require.NoError(t, err)
				gpu := gxBuild(t, e, func() (*kmap.Map, error) {
					return e.SubmanifoldMap(gxCoords(t, e, sc.coords), sc.ext, g.k, g.d)
				})
				// Derive first (from the device tables alone), then load.
				gxSameDerived(t, e, gpu, cpu)
				gxSameMap(t, e, gpu, cpu)
				// The brick search at every size (the engine takes it from
				// brickMinRows rows on; it applies to 3×3×3 of dilation 1).
				if g.k == [3]int{3, 3, 3} && g.d == [3]int{1, 1, 1} {
					require.NoError(t, e.d.do(func() error { e.d.brickMinRows = 0; return nil }))
					b := gxBuild(t, e, func() (*kmap.Map, error) {
						return e.SubmanifoldMap(gxCoords(t, e, sc.coords), sc.ext, g.k, g.d)
					})
					require.NoError(t, e.d.do(func() error { e.d.brickMinRows = brickMinRows; return nil }))
					// Below kmap.BalancedKeyMaxRows its Gray order is
					// ranked again from the table (TestGPUSubmanifoldMapLarge
					// covers the ranks the search writes).
					gxSameDerived(t, e, b, cpu)
					gxSameMap(t, e, b, cpu)
				}
				// Host coordinates work too and alias the caller's slice.
				h := gxBuild(t, e, func() (*kmap.Map, error) {
					return e.SubmanifoldMap(sparse.Matrix{Rows: len(sc.coords) / 4, Cols: 4, Data: sc.coords}, sc.ext, g.k, g.d)
				})
				gxLoad(t, e, h)
				require.True(t, slices.Equal(cpu.Nbr, h.Nbr))
				if len(sc.coords) > 0 {
					require.Same(t, &sc.coords[0], &h.InCoords[0])
				}
			})
		}
	}
}

// gxBlobs returns the unique coordinates of random blobs (density 1/2)
// of side `side` at the given corners (batch, x, y, z), clipped to ext,
// shuffled: neighbours straddle the grid faces and the batch boundary.
func gxBlobs(rng *rand.Rand, ext grid.Extent, side int, corners [][4]int) []int32 {
	seen := map[[4]int]bool{}
	var c []int32
	for _, o := range corners {
		for dx := range side {
			for dy := range side {
				for dz := range side {
					p := [4]int{o[0], o[1] + dx, o[2] + dy, o[3] + dz}
					if p[1] >= ext.X || p[2] >= ext.Y || p[3] >= ext.Z || seen[p] || rng.IntN(2) == 0 {
						continue
					}
					seen[p] = true
					c = append(c, int32(p[0]), int32(p[1]), int32(p[2]), int32(p[3]))
				}
			}
		}
	}
	return gxShuffled(rng, c)
}

// gxSortedRows returns the [N, 4] rows of c sorted by (batch, x, y, z).
func gxSortedRows(c []int32) []int32 {
	rows := make([][4]int32, len(c)/4)
	for i := range rows {
		copy(rows[i][:], c[4*i:4*i+4])
	}
	slices.SortFunc(rows, func(a, b [4]int32) int { return slices.Compare(a[:], b[:]) })
	out := make([]int32, 0, len(c))
	for _, r := range rows {
		out = append(out, r[:]...)
	}
	return out
}

// TestGPUSubmanifoldMapSymmetric checks the half-tap submanifold builder
// (kmap_nbr_sub: look up the taps before the centre one z-column per
// thread, one hash walk per group of 4 keys, write each hit and its mirror
// into a table filled with −1) against kmap.NewSubmanifold in both
// key layouts (narrow: 32-bit keys; wide: an extent of more than 2^32
// sites), with dilations, anisotropic kernels, a batch of 3, voxels on
// every grid face, one voxel and none. The reverse table is not built with
// the map: it is derived on first use (or by DeriveTables with
// TableReverse) and equals cpu.Reverse(); DeriveTables(TableMasked) does
// not derive it. Two builds give the same tables.
func TestGPUSubmanifoldMapSymmetric(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(31, 32))
	narrow := grid.Extent{Batch: 3, X: 12, Y: 9, Z: 10}
	wide := grid.Extent{Batch: 3, X: 4000, Y: 3000, Z: 1000} // 3.6e10 sites
	require.Equal(t, 32, narrow.KeyBits())
	require.Equal(t, 64, wide.KeyBits())
	corners := func(ext grid.Extent) [][4]int {
		return [][4]int{
			{0, 0, 0, 0},
			{1, ext.X - 5, ext.Y - 5, ext.Z - 5},
			{2, ext.X - 3, 0, ext.Z / 2},
			{2, ext.X / 2, ext.Y - 4, 0},
		}
	}
	scenes := []gxScene{
		{"narrow-empty", nil, narrow},
		{"narrow-single", []int32{1, 0, 8, 9}, narrow},
		{"narrow-blobs", gxBlobs(rng, narrow, 6, corners(narrow)), narrow},
		{"wide-empty", nil, wide},
		{"wide-single", []int32{2, 3999, 2999, 999}, wide},
		{"wide-blobs", gxBlobs(rng, wide, 7, corners(wide)), wide},
		// Rows in key order (consecutive rows are z-neighbours) as well
		// as shuffled: kmap_nbr_sub must not depend on the row order.
		{"narrow-sorted", gxSortedRows(gxBlobs(rng, narrow, 6, corners(narrow))), narrow},
		{"wide-sorted", gxSortedRows(gxBlobs(rng, wide, 7, corners(wide))), wide},
	}
	ks := []struct{ k, d [3]int }{
		{[3]int{3, 3, 3}, [3]int{1, 1, 1}},
		{[3]int{3, 3, 3}, [3]int{2, 1, 3}},
		{[3]int{1, 1, 1}, [3]int{1, 1, 1}}, // no tap but the centre
		{[3]int{1, 1, 3}, [3]int{1, 1, 2}}, // one tap before the centre
		{[3]int{5, 3, 1}, [3]int{1, 2, 1}},
		{[3]int{5, 5, 5}, [3]int{1, 1, 1}},
		// z-columns of kmap_nbr_sub spanning two hash groups (Kz = 5, 7),
		// and z-dilations putting each tap of a column in its own group.
		{[3]int{3, 3, 5}, [3]int{1, 1, 1}},
		{[3]int{1, 3, 7}, [3]int{2, 1, 1}},
		{[3]int{3, 1, 3}, [3]int{1, 1, 4}},
		{[3]int{3, 3, 3}, [3]int{1, 1, 5}},
	}
	for _, sc := range scenes {
		for _, g := range ks {
			t.Run(fmt.Sprintf("%s/k%v/d%v", sc.name, g.k, g.d), func(t *testing.T) {
				cpu, err := kmap.NewSubmanifold(sc.coords, sc.ext, g.k, g.d)
				require.NoError(t, err)
				build := func() *kmap.Map {
					return gxBuild(t, e, func() (*kmap.Map, error) {
						return e.SubmanifoldMap(gxCoords(t, e, sc.coords), sc.ext, g.k, g.d)
					})
				}
				gpu := build()
				var haveRev bool
				require.NoError(t, e.d.do(func() error { haveRev = e.entry(gpu).haveRev; return nil }))
				require.False(t, haveRev, "a submanifold build leaves the reverse table to first use")
				require.NoError(t, e.DeriveTables(gpu, TableMasked))
				require.NoError(t, e.d.do(func() error { haveRev = e.entry(gpu).haveRev; return nil }))
				require.False(t, haveRev, "DeriveTables(TableMasked) derives no reverse table")
				require.NoError(t, e.DeriveTables(gpu, TableReverse))
				require.NoError(t, e.d.do(func() error { haveRev = e.entry(gpu).haveRev; return nil }))
				require.True(t, haveRev, "DeriveTables(TableReverse) derives the reverse table")
				gxSameMap(t, e, gpu, cpu)
				// Centre identity and the mirror relation, directly.
				V := cpu.V()
				for o := range cpu.NOut {
					require.Equal(t, int32(o), gpu.Nbr[o*V+(V-1)/2])
					for v := range V {
						if j := gpu.Nbr[o*V+v]; j >= 0 {
							require.Equal(t, int32(o), gpu.Nbr[int(j)*V+V-1-v])
						}
					}
				}
				again := build()
				dn, dr := gxDeviceTables(t, e, again)
				require.True(t, slices.Equal(cpu.Nbr, dn), "second build: Nbr differs at %d", firstDiff(cpu.Nbr, dn))
				require.True(t, slices.Equal(cpu.Reverse(), dr), "second build: Rev differs at %d", firstDiff(cpu.Reverse(), dr))
				gxSameDerived(t, e, again, cpu)
			})
		}
	}
}

var gxStridedConvs = []grid.Conv{
	grid.Cube(2, 2, 0, 1),
	grid.Cube(3, 2, 1, 1),
	grid.Cube(3, 1, 0, 1),
	grid.Cube(2, 3, 0, 2),
	{Kernel: [3]int{2, 3, 1}, Stride: [3]int{2, 1, 3}, Padding: [3]int{0, 1, 0}, Dilation: [3]int{1, 2, 1}},
}

// TestGPUStridedMap compares GPU strided maps with generated outputs and
// with given outputs, their inverse maps and derived tables with the CPU.
func TestGPUStridedMap(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(13, 14))
	for _, sc := range gxScenes(rng) {
		for _, conv := range gxStridedConvs {
			if _, err := conv.StridedExtent(sc.ext); err != nil {
				continue
			}
			t.Run(fmt.Sprintf("%s/%v", sc.name, conv), func(t *testing.T) {
				cpu, err := kmap.NewStrided(sc.coords, sc.ext, conv, nil)
				require.NoError(t, err)
				gpu := gxBuild(t, e, func() (*kmap.Map, error) {
					return e.StridedMap(gxCoords(t, e, sc.coords), sc.ext, conv, sparse.Matrix{})
				})
				// The inverse of a map still on the device is built there.
				ci, err := kmap.NewInverse(cpu)
				require.NoError(t, err)
				gi := gxBuild(t, e, func() (*kmap.Map, error) { return e.InverseMap(gpu) })
				require.False(t, gpu.Loaded())
				gxSameDerived(t, e, gpu, cpu)
				gxSameMap(t, e, gpu, cpu)
				gxSameDerived(t, e, gi, ci)
				gxSameMap(t, e, gi, ci)
				// And the inverse of a loaded map aliases its host coordinates.
				gl := gxBuild(t, e, func() (*kmap.Map, error) { return e.InverseMap(gpu) })
				if gpu.NIn > 0 && gpu.NOut > 0 {
					require.Same(t, &gpu.InCoords[0], &gl.OutCoords[0])
					require.Same(t, &gpu.OutCoords[0], &gl.InCoords[0])
				}
				gxSameMap(t, e, gl, ci)

				// Given outputs: a shuffled subset of the reached sites plus
				// unreached ones.
				outs := gxShuffled(rng, cpu.OutCoords)
				outs = outs[:4*(len(outs)/4/2)]
				oe := cpu.Out
				have := map[[4]int32]bool{}
				for i := 0; i < len(outs); i += 4 {
					have[[4]int32(outs[i:i+4])] = true
				}
				for range 20 {
					p := [4]int32{int32(rng.IntN(oe.Batch)), int32(rng.IntN(oe.X)), int32(rng.IntN(oe.Y)), int32(rng.IntN(oe.Z))}
					if !have[p] {
						have[p] = true
						outs = append(outs, p[:]...)
					}
				}
				cg, err := kmap.NewStrided(sc.coords, sc.ext, conv, outs)
				require.NoError(t, err)
				gg := gxBuild(t, e, func() (*kmap.Map, error) {
					return e.StridedMap(gxCoords(t, e, sc.coords), sc.ext, conv, gxCoords(t, e, outs))
				})
				gxSameMap(t, e, gg, cg)
				// Host output coordinates stay the caller's slice.
				gh := gxBuild(t, e, func() (*kmap.Map, error) {
					return e.StridedMap(gxCoords(t, e, sc.coords), sc.ext, conv, sparse.Matrix{Rows: len(outs) / 4, Cols: 4, Data: outs})
				})
				if len(outs) > 0 {
					require.Same(t, &outs[0], &gh.OutCoords[0])
				}
				gxSameMap(t, e, gh, cg)
			})
		}
	}
}

// TestGPUTransposedMap compares GPU transposed maps with the CPU's.
func TestGPUTransposedMap(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(15, 16))
	convs := []grid.Conv{grid.Cube(2, 2, 0, 1), grid.Cube(3, 2, 1, 1), grid.Cube(3, 1, 1, 1),
		{Kernel: [3]int{3, 2, 1}, Stride: [3]int{1, 2, 3}, Padding: [3]int{1, 0, 0}, Dilation: [3]int{2, 1, 1}}}
	for _, sc := range gxScenes(rng) {
		for _, conv := range convs {
			t.Run(fmt.Sprintf("%s/%v", sc.name, conv), func(t *testing.T) {
				cpu, err := kmap.NewTransposed(sc.coords, sc.ext, conv)
				require.NoError(t, err)
				gpu := gxBuild(t, e, func() (*kmap.Map, error) { return e.TransposedMap(gxCoords(t, e, sc.coords), sc.ext, conv) })
				gxSameDerived(t, e, gpu, cpu)
				gxSameMap(t, e, gpu, cpu)
			})
		}
	}
}

// TestGPUDeriveHostMap derives device tables of a CPU-built map (its Nbr
// is uploaded once) and compares them with the CPU's.
func TestGPUDeriveHostMap(t *testing.T) {
	e := gxEngine(t)
	c, ext := synth.SphereShell(48, 2)
	for _, k := range [][3]int{{3, 3, 3}, {5, 5, 5}} {
		cpu, err := kmap.NewSubmanifold(c, ext, k, [3]int{1, 1, 1})
		require.NoError(t, err)
		require.NoError(t, e.DeriveTables(cpu, TablesAll))
		_, dr := gxDeviceTables(t, e, cpu)
		require.Equal(t, cpu.Reverse(), dr)
		gxSameDerived(t, e, cpu, cpu)
	}
	s, err := kmap.NewStrided(c, ext, grid.Cube(2, 2, 0, 1), nil)
	require.NoError(t, err)
	gxSameDerived(t, e, s, s)
	_, dr := gxDeviceTables(t, e, s)
	require.Equal(t, s.Reverse(), dr)
}

// TestGPUMapErrors checks bad input: errors with the CPU builders' rows
// and sentinels, never a panic.
func TestGPUMapErrors(t *testing.T) {
	e := gxEngine(t)
	ext := grid.Extent{Batch: 1, X: 6, Y: 6, Z: 6}
	k3, d1 := [3]int{3, 3, 3}, [3]int{1, 1, 1}
	ok := []int32{0, 1, 1, 1, 0, 2, 2, 2}
	dup := []int32{0, 1, 1, 1, 0, 2, 2, 2, 0, 1, 1, 1}
	out := []int32{0, 1, 1, 1, 0, 6, 2, 2}
	_, err := e.SubmanifoldMap(gxCoords(t, e, dup), ext, k3, d1)
	require.ErrorIs(t, err, kmap.ErrDuplicate)
	require.ErrorIs(t, err, sparse.ErrDuplicate)
	require.ErrorContains(t, err, "rows 0 and 2 are both (0, 1, 1, 1)")
	// The hash path reads the inserts' status after queueing the
	// neighbour search (hashCoordsThen), then rebuilds through the checks.
	_, err = e.SubmanifoldMap(gxCoords(t, e, out), ext, k3, d1)
	require.ErrorIs(t, err, kmap.ErrOutOfRange)
	require.ErrorContains(t, err, "row 1 (0, 6, 2, 2)")
	_, err = e.StridedMap(gxCoords(t, e, out), ext, grid.Cube(2, 2, 0, 1), sparse.Matrix{})
	require.ErrorIs(t, err, kmap.ErrOutOfRange)
	require.ErrorContains(t, err, "row 1 (0, 6, 2, 2)")
	_, err = e.TransposedMap(gxCoords(t, e, dup), ext, grid.Cube(2, 2, 0, 1))
	require.ErrorIs(t, err, kmap.ErrDuplicate)
	_, err = e.SubmanifoldMap(gxCoords(t, e, ok), ext, [3]int{2, 3, 3}, d1)
	require.ErrorIs(t, err, grid.ErrBadGeometry)
	_, err = e.SubmanifoldMap(gxCoords(t, e, ok), grid.Extent{Batch: 0, X: 1, Y: 1, Z: 1}, k3, d1)
	require.ErrorIs(t, err, grid.ErrBadExtent)
	_, err = e.StridedMap(gxCoords(t, e, ok), ext, grid.Cube(7, 1, 0, 1), sparse.Matrix{})
	require.ErrorIs(t, err, grid.ErrBadGeometry)
	_, err = e.StridedMap(gxCoords(t, e, ok), ext, grid.Cube(2, 2, 0, 1), gxCoords(t, e, []int32{0, 1, 1, 1, 0, 1, 1, 1}))
	require.ErrorIs(t, err, kmap.ErrDuplicate)
	require.ErrorContains(t, err, "output coordinates: rows 0 and 1")
	_, err = e.SubmanifoldMap(sparse.Matrix{Rows: 2, Cols: 3, Data: []int32{1, 2, 3, 4, 5, 6}}, ext, k3, d1)
	require.ErrorIs(t, err, sparse.ErrShape)
	f, err := e.ToDevice(sparse.Matrix{Rows: 1, Cols: 4, Data: []float32{0, 1, 1, 1}})
	require.NoError(t, err)
	_, err = e.SubmanifoldMap(f, ext, k3, d1)
	require.ErrorIs(t, err, sparse.ErrShape)
	sm, err := e.SubmanifoldMap(gxCoords(t, e, ok), ext, k3, d1)
	require.NoError(t, err)
	_, err = e.InverseMap(sm)
	require.ErrorIs(t, err, kmap.ErrMap)
	_, err = e.InverseMap(nil)
	require.ErrorIs(t, err, kmap.ErrMap)
	require.ErrorIs(t, e.DeriveTables(nil, TablesAll), sparse.ErrShape)
}

// TestGPUBrickSearchErrors checks that the brick search, which builds no
// coordinate table unless a row is bad, reports a duplicate or an
// out-of-range row exactly as the per-tap search does (same error, same
// rows), including a duplicate far from the first row and rows beyond the
// extent in each axis and the batch.
func TestGPUBrickSearchErrors(t *testing.T) {
	e := gxEngine(t)
	ext := grid.Extent{Batch: 2, X: 9, Y: 7, Z: 8}
	k3, d1 := [3]int{3, 3, 3}, [3]int{1, 1, 1}
	rng := rand.New(rand.NewPCG(21, 22))
	good := gxShuffled(rng, synth.RandomScene(rng, ext, 0.4))
	n := len(good) / 4
	withRow := func(r int, c [4]int32) []int32 {
		out := slices.Clone(good)
		copy(out[4*r:], c[:])
		return out
	}
	at := func(r int) [4]int32 { return [4]int32(good[4*r : 4*r+4]) }
	cases := map[string][]int32{
		"duplicate":            withRow(n-1, at(3)),
		"duplicate neighbours": withRow(1, at(0)),
		"x out":                withRow(n/2, [4]int32{0, 9, 1, 1}),
		"z negative":           withRow(2, [4]int32{1, 1, 1, -1}),
		"batch out":            withRow(n-2, [4]int32{2, 0, 0, 0}),
	}
	for name, coords := range cases {
		t.Run(name, func(t *testing.T) {
			_, want := e.SubmanifoldMap(gxCoords(t, e, coords), ext, k3, d1)
			require.Error(t, want)
			// With the pool sized after the count, and by guesses that are
			// too small and large enough (the search then runs before the
			// status is read).
			for _, ratio := range []float64{0, 1e-9, 1} {
				require.NoError(t, e.d.do(func() error {
					e.d.brickMinRows, e.d.bricks = 0, brickRatios{ratio: [brickHistory]float64{ratio}}
					return nil
				}))
				_, got := e.SubmanifoldMap(gxCoords(t, e, coords), ext, k3, d1)
				require.NoError(t, e.d.do(func() error { e.d.brickMinRows = brickMinRows; return nil }))
				require.Error(t, got, "ratio %g", ratio)
				require.Equal(t, want.Error(), got.Error(), "ratio %g", ratio)
				for _, kind := range []error{kmap.ErrDuplicate, kmap.ErrOutOfRange} {
					require.Equal(t, errors.Is(want, kind), errors.Is(got, kind), "%v, ratio %g", kind, ratio)
				}
			}
		})
	}
	// And a valid scene still builds with bricks forced.
	require.NoError(t, e.d.do(func() error { e.d.brickMinRows = 0; return nil }))
	m, err := e.SubmanifoldMap(gxCoords(t, e, good), ext, k3, d1)
	require.NoError(t, e.d.do(func() error { e.d.brickMinRows = brickMinRows; return nil }))
	require.NoError(t, err)
	cpu, err := kmap.NewSubmanifold(good, ext, k3, d1)
	require.NoError(t, err)
	gxSameMap(t, e, m, cpu)
}

// TestGPUBrickPoolGuess builds brick-searched maps with the pool sized
// every way buildSubNbrBricks sizes it — by the count after a wait (no
// build recorded, or EnvNoBrickGuess), by a guess that holds every brick
// (close, or a brick per row), by a guess too small (the search repeated
// over a pool of the count) — with a guessed pool filled by the insert
// and by the separate scatter pass (EnvNoBrickFusedScatter), with the tap
// masks from the table writes' ballots or from kmap_nbr_brick_loop's reads
// (EnvNoBrickBallotMask), and compares
// each with kmap.NewSubmanifold, below and above kmap.BalancedKeyMaxRows
// (the search then writes the masks and ranks too).
func TestGPUBrickPoolGuess(t *testing.T) {
	e := gxEngine(t)
	require.NoError(t, e.d.do(func() error { e.d.brickMinRows = 0; return nil }))
	defer func() {
		require.NoError(t, e.d.do(func() error {
			e.d.brickMinRows, e.d.noBrickGuess, e.d.bricks = brickMinRows, false, brickRatios{}
			e.d.noBrickFusedScatter, e.d.noBrickBallotMask = false, false
			return nil
		}))
	}()
	for _, res := range []int{24, 192} {
		coords, ext := synth.SphereShell(res, 1)
		n := len(coords) / 4
		require.Equal(t, res > 24, n > kmap.BalancedKeyMaxRows)
		cpu, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
		require.NoError(t, err)
		// The shell's bricks per row, from the exact build.
		var ratio float64
		cases := []struct {
			name     string
			set      func(d *Device)
			research bool
		}{
			{"count first", func(d *Device) { d.bricks = brickRatios{} }, false},
			{"close guess", func(d *Device) { d.bricks = brickRatios{ratio: [brickHistory]float64{ratio}} }, false},
			{"a brick per row", func(d *Device) { d.bricks = brickRatios{ratio: [brickHistory]float64{1}} }, false},
			{"guess too small", func(d *Device) { d.bricks = brickRatios{ratio: [brickHistory]float64{1e-9}} }, true},
			{"close guess, scatter pass", func(d *Device) {
				d.noBrickFusedScatter = true
				d.bricks = brickRatios{ratio: [brickHistory]float64{ratio}}
			}, false},
			{"guess too small, scatter pass", func(d *Device) {
				d.noBrickFusedScatter = true
				d.bricks = brickRatios{ratio: [brickHistory]float64{1e-9}}
			}, true},
			{"close guess, masks by the loop", func(d *Device) {
				d.noBrickBallotMask = true
				d.bricks = brickRatios{ratio: [brickHistory]float64{ratio}}
			}, false},
			{"no guess", func(d *Device) { d.noBrickGuess = true; d.bricks = brickRatios{ratio: [brickHistory]float64{1e-9}} }, false},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%d rows/%s", n, c.name), func(t *testing.T) {
				var before int
				require.NoError(t, e.d.do(func() error {
					c.set(e.d)
					before = e.d.brickResearches
					return nil
				}))
				gpu := gxBuild(t, e, func() (*kmap.Map, error) {
					return e.SubmanifoldMap(gxCoords(t, e, coords), ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
				})
				var researched bool
				require.NoError(t, e.d.do(func() error {
					researched = e.d.brickResearches > before
					ratio = max(ratio, e.d.bricks.ratio[(e.d.bricks.next+brickHistory-1)%brickHistory])
					e.d.noBrickGuess, e.d.noBrickFusedScatter, e.d.noBrickBallotMask = false, false, false
					return nil
				}))
				require.Equal(t, c.research, researched, "search repeated")
				require.Greater(t, ratio, 0.0)
				require.Greater(t, ratio*float64(n), float64(brickGuessMin), "too few bricks to overflow the smallest guess")
				gxSameDerived(t, e, gpu, cpu)
				gxSameMap(t, e, gpu, cpu)
			})
		}
	}
}

// TestGPUPairsCountFromMasks counts pair lists from the rows' tap masks
// (kmap_pairs_count_masks) wherever a map's forward masks are at hand when
// its lists are counted — the hash path's Gray tables (3×3×3), the brick
// search's masks (more than kmap.BalancedKeyMaxRows rows), Gray tables that
// DeriveTables derives before the lists (a brick search of few rows; two
// and three mask words a row at V 125 and 147, 62 and 73 listed taps: bits
// from the second word on; a strided map, all its taps listed) — and from
// the table where they are not (the lists derived alone first) or with
// EnvPairsCountFromTable; every map's derived tables are compared with
// kmap's.
func TestGPUPairsCountFromMasks(t *testing.T) {
	e := gxEngine(t)
	defer func() {
		require.NoError(t, e.d.do(func() error { e.d.brickMinRows, e.d.pairsFromTable = brickMinRows, false; return nil }))
	}()
	small, smallExt := synth.SphereShell(24, 1)
	large, largeExt := synth.SphereShell(192, 1)
	require.Greater(t, len(large)/4, max(kmap.BalancedKeyMaxRows, brickMinRows))
	require.Less(t, len(small)/4, min(kmap.BalancedKeyMaxRows, brickMinRows))
	d1 := [3]int{1, 1, 1}
	k3 := [3]int{3, 3, 3}
	cases := []struct {
		name       string
		coords     []int32
		ext        grid.Extent
		k          [3]int
		strided    bool // a strided map of stride 2 (k unused)
		bricks     bool // the brick search at any size
		pairsFirst bool // DeriveTables(TablePairs) alone before the rest
		fromTable  bool // EnvPairsCountFromTable
		fromMasks  bool // expected: counted from masks
	}{
		{"hash path, its Gray tables", small, smallExt, k3, false, false, false, false, true},
		{"hash path, the lists first", small, smallExt, k3, false, false, true, false, true},
		{"hash path, from the table", small, smallExt, k3, false, false, false, true, false},
		{"brick search, its masks", large, largeExt, k3, false, true, true, false, true},
		{"brick search, from the table", large, largeExt, k3, false, true, false, true, false},
		{"brick search of few rows, the Gray tables", small, smallExt, k3, false, true, false, false, true},
		{"brick search of few rows, the lists first", small, smallExt, k3, false, true, true, false, false},
		{"5×5×5 (V 125), the Gray tables", small, smallExt, [3]int{5, 5, 5}, false, false, false, false, true},
		{"5×5×5 (V 125), the lists first", small, smallExt, [3]int{5, 5, 5}, false, false, true, false, false},
		{"7×7×3 (V 147, 73 taps), the Gray tables", small, smallExt, [3]int{7, 7, 3}, false, false, false, false, true},
		{"strided, the Gray tables", small, smallExt, k3, true, false, false, false, true},
		{"strided, the lists first", small, smallExt, k3, true, false, true, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.NoError(t, e.d.do(func() error {
				e.d.brickMinRows, e.d.pairsFromTable = brickMinRows, c.fromTable
				if c.bricks {
					e.d.brickMinRows = 0
				}
				return nil
			}))
			var cpu, gpu *kmap.Map
			var err error
			if c.strided {
				st := grid.Cube(2, 2, 0, 1)
				cpu, err = kmap.NewStrided(c.coords, c.ext, st, nil)
				require.NoError(t, err)
				gpu = gxBuild(t, e, func() (*kmap.Map, error) {
					return e.StridedMap(gxCoords(t, e, c.coords), c.ext, st, sparse.Matrix{})
				})
			} else {
				cpu, err = kmap.NewSubmanifold(c.coords, c.ext, c.k, d1)
				require.NoError(t, err)
				gpu = gxBuild(t, e, func() (*kmap.Map, error) {
					return e.SubmanifoldMap(gxCoords(t, e, c.coords), c.ext, c.k, d1)
				})
			}
			var before, after int
			require.NoError(t, e.d.do(func() error { before = e.d.maskPairCounts; return nil }))
			if c.pairsFirst {
				require.NoError(t, e.DeriveTables(gpu, TablePairs))
			}
			gxSameDerived(t, e, gpu, cpu)
			require.NoError(t, e.d.do(func() error { after = e.d.maskPairCounts; return nil }))
			want := 0
			if c.fromMasks {
				want = 1
			}
			require.Equal(t, want, after-before, "lists counted from masks")
		})
	}
}

// TestGPUMapEmpty builds every kind of map over no voxels.
func TestGPUMapEmpty(t *testing.T) {
	e := gxEngine(t)
	ext := grid.Extent{Batch: 2, X: 4, Y: 4, Z: 4}
	empty := gxCoords(t, e, nil)
	sm, err := e.SubmanifoldMap(empty, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	require.Equal(t, 0, sm.NOut)
	require.Empty(t, sm.Nbr)
	require.NoError(t, e.DeriveTables(sm, TablesAll))
	st, err := e.StridedMap(empty, ext, grid.Cube(2, 2, 0, 1), sparse.Matrix{})
	require.NoError(t, err)
	require.Equal(t, 0, st.NOut)
	require.NoError(t, e.DeriveTables(st, TablesAll))
	inv, err := e.InverseMap(st)
	require.NoError(t, err)
	require.Equal(t, 0, inv.NOut)
	tr, err := e.TransposedMap(empty, ext, grid.Cube(2, 2, 0, 1))
	require.NoError(t, err)
	require.Equal(t, 0, tr.NOut)
	// Inputs whose windows reach no output: strided outputs exist but
	// given outputs reach nothing.
	st2, err := e.StridedMap(gxCoords(t, e, []int32{0, 0, 0, 0}), ext, grid.Cube(2, 2, 0, 1), gxCoords(t, e, []int32{1, 1, 1, 1}))
	require.NoError(t, err)
	gxLoad(t, e, st2)
	require.Equal(t, []int32{-1, -1, -1, -1, -1, -1, -1, -1}, st2.Nbr)
	gxSameDerived(t, e, st2, st2)
}

// gxEvents records CUDA events between the phases of a device pipeline.
type gxEvents struct{ ev []cuEvent }

func (g *gxEvents) mark(d *Device) error {
	ev, err := eventCreate()
	if err != nil {
		return err
	}
	g.ev = append(g.ev, ev)
	return eventRecord(ev, d.stream)
}

// ms returns the milliseconds between consecutive marks and frees them.
func (g *gxEvents) ms() ([]float64, error) {
	if err := eventSync(g.ev[len(g.ev)-1]); err != nil {
		return nil, err
	}
	out := make([]float64, len(g.ev)-1)
	for i := range out {
		v, err := eventElapsed(g.ev[i], g.ev[i+1])
		if err != nil {
			return nil, err
		}
		out[i] = float64(v)
	}
	for _, ev := range g.ev {
		_ = eventDestroy(ev)
	}
	return out, nil
}

// BenchmarkGPUSubmanifoldMap times the device part of a submanifold map
// build on a sphere shell (RES 1024: N = 4.1M): hash build (with its
// status read back), neighbour table, reverse table, and the forward Gray
// order with tile unions; CUDA events, reported per phase in ms. Path
// "sub" is what SubmanifoldMap runs (table at load ≤ 1/4, −1 fill +
// kmap_nbr_sub); "fine" is the previous path (load ≤ 1/2, kmap_nbr_fine
// over all V taps), kept here for comparison in the same run. The map
// build itself is hash + nbr (the reverse table is derived on first use).
func BenchmarkGPUSubmanifoldMap(b *testing.B) {
	e := gxEngine(b)
	for _, res := range []int{256, 1024} {
		for _, path := range []string{"brick", "sub", "fine"} {
			b.Run(fmt.Sprintf("res%d/%s", res, path), func(b *testing.B) {
				coords, ext := synth.SphereShell(res, 1)
				n := len(coords) / 4
				dc := gxCoords(b, e, coords)
				defer e.Free(dc)
				conv := grid.Submanifold([3]int{3, 3, 3}, [3]int{1, 1, 1})
				rows := tileHeights()[0]
				phases := []string{"hash", "nbr", "rev", "gray", "tiles"}
				sum := make([]float64, len(phases))
				for b.Loop() {
					var g gxEvents
					err := e.d.do(func() error {
						d := e.d
						c := deviceCoords{ptr: dc.Data.(*Buffer).ptr, n: n}
						if err := g.mark(d); err != nil {
							return err
						}
						perKey := int64(mapSlotsPerKey)
						if path != "sub" {
							perKey = 2
						}
						t, err := d.hashCoordsPer(c.ptr, int64(n), ext, 0, perKey, false, "")
						if err != nil {
							return err
						}
						defer d.freeTable(t)
						if err := g.mark(d); err != nil {
							return err
						}
						dm := &devMap{nIn: n, nOut: n, V: conv.Volume()}
						defer d.freeDevMap(dm)
						switch path {
						case "fine":
							err = d.buildNbr(dm, c.ptr, ext, conv, t, false)
						case "brick":
							err = d.buildSubNbrBricks(dm, c.ptr, ext)
						default:
							err = d.buildSubNbr(dm, c.ptr, ext, conv, t)
						}
						if err != nil {
							return err
						}
						if err := g.mark(d); err != nil {
							return err
						}
						if err := d.buildRev(dm, true); err != nil {
							return err
						}
						if err := g.mark(d); err != nil {
							return err
						}
						gt, err := d.grayMasks(dm.nbr.ptr, n, dm.V)
						if err != nil {
							return err
						}
						defer func() {
							d.freeTemp(gt.mask)
							d.freeTemp(gt.order)
						}()
						if err := g.mark(d); err != nil {
							return err
						}
						tt, err := d.tileUnions(gt.mask.ptr, gt.order.ptr, n, dm.V, rows)
						if err != nil {
							return err
						}
						defer func() {
							d.freeTemp(tt.seg)
							d.freeTemp(tt.taps)
							d.freeTemp(tt.longest)
							d.freeTemp(tt.byRows)
						}()
						if _, err := d.tileSchedule(&tt, gt.order.ptr, n, dm.V, rows, kernels.F16); err != nil {
							return err
						}
						if err := g.mark(d); err != nil {
							return err
						}
						ms, err := g.ms()
						for i, v := range ms {
							sum[i] += v
						}
						return err
					})
					require.NoError(b, err)
				}
				total := 0.0
				for i, p := range phases {
					b.ReportMetric(sum[i]/float64(b.N), p+"-ms")
					total += sum[i]
				}
				b.ReportMetric(total/float64(b.N), "device-ms")
				b.ReportMetric((sum[0]+sum[1])/float64(b.N), "map-ms")
				b.ReportMetric(float64(n), "voxels")
			})
		}
	}
}

// BenchmarkGPUSubmanifoldMapPublic times SubmanifoldMap end to end (no
// host table is downloaded; ReleaseMap drops the device tables).
func BenchmarkGPUSubmanifoldMapPublic(b *testing.B) {
	e := gxEngine(b)
	for _, res := range []int{256, 1024} {
		b.Run(fmt.Sprintf("res%d", res), func(b *testing.B) {
			coords, ext := synth.SphereShell(res, 1)
			dc := gxCoords(b, e, coords)
			defer e.Free(dc)
			for b.Loop() {
				m, err := e.SubmanifoldMap(dc, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
				require.NoError(b, err)
				e.ReleaseMap(m)
			}
			b.ReportMetric(float64(len(coords)/4), "voxels")
		})
	}
}

// BenchmarkGPUStridedMap times StridedMap (K2S2, generated outputs) end to
// end on a sphere shell (no host table is downloaded).
func BenchmarkGPUStridedMap(b *testing.B) {
	e := gxEngine(b)
	for _, res := range []int{256, 1024} {
		b.Run(fmt.Sprintf("res%d", res), func(b *testing.B) {
			coords, ext := synth.SphereShell(res, 1)
			dc := gxCoords(b, e, coords)
			defer e.Free(dc)
			for b.Loop() {
				m, err := e.StridedMap(dc, ext, grid.Cube(2, 2, 0, 1), sparse.Matrix{})
				require.NoError(b, err)
				e.ReleaseMap(m)
			}
			b.ReportMetric(float64(len(coords)/4), "voxels")
		})
	}
}

// BenchmarkGPUDeriveTables times DeriveTables(TablesAll) (pair lists, Gray
// orders of both tables and their tile unions for one tile height, as a
// training step uses) of a submanifold map on a sphere shell.
func BenchmarkGPUDeriveTables(b *testing.B) {
	e := gxEngine(b)
	for _, res := range []int{256, 1024} {
		b.Run(fmt.Sprintf("res%d", res), func(b *testing.B) {
			coords, ext := synth.SphereShell(res, 1)
			dc := gxCoords(b, e, coords)
			defer e.Free(dc)
			m, err := e.SubmanifoldMap(dc, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
			require.NoError(b, err)
			for b.Loop() {
				// Drop the derived tables, keep Nbr and Rev.
				require.NoError(b, e.d.do(func() error {
					me := e.entry(m)
					if p := me.pairs; p != nil {
						for _, r := range p.bufs() {
							if r.ptr != 0 {
								e.d.freeTemp(r)
							}
						}
						me.pairs = nil
					}
					for i, g := range me.gray {
						if g != nil {
							e.d.freeTemp(g.mask)
							e.d.freeTemp(g.order)
							me.gray[i] = nil
						}
					}
					for k, t := range me.tiles {
						e.d.freeTemp(t.seg)
						e.d.freeTemp(t.taps)
						e.d.freeTemp(t.longest)
						e.d.freeTemp(t.byRows)
						delete(me.tiles, k)
					}
					return nil
				}))
				require.NoError(b, e.DeriveTables(m, TablesAll, tileHeights()[0]))
			}
			b.ReportMetric(float64(len(coords)/4), "voxels")
		})
	}
}

// TestGPURegroup runs masks_regroup32/64 and their 512- and 1,024-thread
// twins (EnvRegroupThreads) on random single-word masks (three taps: many
// ties; 27; 40 and all 64 bits) over orders of one row, a partial window,
// one window, several windows with a partial last one, against
// kmap.RegroupWindow: in random order (mask classes of one row or a few),
// and drawn from pools of 20, 100, 150 and 700 masks in mask order (long
// classes; windows of at most 64, 128, 256 and more classes, the kernels'
// ways of running the greedy: on one warp with two, four or eight classes
// a lane, or on the block); checks the twins' order of a shell map against
// kmap's (over 256 classes a window: the block path); then EnvNoRegroup's
// switch on a shell map, whose device order is kmap's Gray order with it
// and kmap's regrouped order without (gxSameDerived checks the latter on
// every map), and EnvRegroupMaxRows's bound on both sides of a shell's
// rows.
func TestGPURegroup(t *testing.T) {
	e := gxEngine(t)
	rng := rand.New(rand.NewPCG(21, 22))
	for _, c := range []struct{ rows, V, pool int }{
		{1, 27, 0}, {200, 3, 0}, {1024, 27, 0}, {5000, 3, 0}, {9000, 64, 0}, {3000, 40, 0},
		{5000, 27, 20}, {3000, 40, 100}, {4100, 27, 150}, {3000, 64, 150}, {9000, 27, 700}, {2048, 64, 700},
	} {
		umask := synth.TapMasks(rng, c.rows, c.V, c.pool)
		mask := make([]int64, c.rows)
		for r, m := range umask {
			mask[r] = int64(m)
		}
		order := make([]int32, c.rows)
		for i, p := range rng.Perm(c.rows) {
			order[i] = int32(p)
		}
		if c.pool > 0 {
			slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(umask[a], umask[b]) })
		}
		want := regroupedOnHost(umask, order)
		for _, threads := range regroupBlocks {
			var got []int32
			require.NoError(t, e.d.do(func() error {
				e.d.regroupThreads = threads
				defer func() { e.d.regroupThreads = regroupThreads }()
				m, err := uploadSlice(e.d, mask)
				if err != nil {
					return err
				}
				defer e.d.freeTemp(m)
				o, err := uploadSlice(e.d, order)
				if err != nil {
					return err
				}
				defer e.d.freeTemp(o)
				if err := e.d.regroupWindows(m.ptr, o.ptr, c.rows, c.V); err != nil {
					return err
				}
				got, err = download[int32](e.d, o.ptr, c.rows)
				return err
			}))
			require.True(t, slices.Equal(want, got), "%+v, %d threads: orders differ at %d", c, threads, firstDiff(want, got))
		}
	}
	// deviceOrder builds the submanifold map of a shell of res on the
	// device with set applied to the device (undone by reset after) and
	// returns its forward masked order, with kmap's masks of the same map.
	deviceOrder := func(res int, set, reset func(d *Device)) ([]int32, *kmap.Masked) {
		coords, ext := synth.SphereShell(res, 1)
		cpu, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
		require.NoError(t, err)
		require.NoError(t, e.d.do(func() error { set(e.d); return nil }))
		defer func() { require.NoError(t, e.d.do(func() error { reset(e.d); return nil })) }()
		gpu := gxBuild(t, e, func() (*kmap.Map, error) {
			return e.SubmanifoldMap(gxCoords(t, e, coords), ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
		})
		defer e.ReleaseMap(gpu)
		var got []int32
		require.NoError(t, e.d.do(func() error {
			g, err := e.grayTablesFor(gpu, false)
			if err != nil {
				return err
			}
			got, err = download[int32](e.d, g.order.ptr, cpu.NOut)
			return err
		}))
		return got, cpu.Masked()
	}
	for _, threads := range regroupBlocks {
		got, ms := deviceOrder(64, func(d *Device) { d.regroupThreads = threads }, func(d *Device) { d.regroupThreads = regroupThreads })
		require.True(t, slices.Equal(ms.Order, got), "%d threads: orders differ at %d", threads, firstDiff(ms.Order, got))
	}
	for _, off := range []bool{false, true} {
		got, ms := deviceOrder(64, func(d *Device) { d.noRegroup = off }, func(d *Device) { d.noRegroup = false })
		require.False(t, slices.Equal(ms.Gray, ms.Order), "the shell is regrouped")
		want := ms.Order
		if off {
			want = ms.Gray
		}
		require.True(t, slices.Equal(want, got), "noRegroup %v: orders differ at %d", off, firstDiff(want, got))
	}
	// EnvRegroupMaxRows: the device's bound decides, whatever kmap's: a
	// shell just above it keeps its Gray order, and at its rows it is
	// regrouped as kmap regroups it.
	shell, _ := synth.SphereShell(64, 1)
	rows := len(shell) / 4 // (batch, x, y, z) per row
	for _, bound := range []int{rows - 1, rows} {
		got, ms := deviceOrder(64, func(d *Device) { d.regroupMaxRows = bound }, func(d *Device) { d.regroupMaxRows = kmap.RegroupMaxRows })
		require.Len(t, ms.Gray, rows)
		want := ms.Order
		if bound < rows {
			want = ms.Gray
		}
		require.True(t, slices.Equal(want, got), "regroup bound %d (%d rows): orders differ at %d", bound, rows, firstDiff(want, got))
	}
}

// regroupedOnHost is order of the single-word masks mask regrouped window
// by window as the engines regroup a Gray order (kmap.RegroupWindow over
// windows of kmap.RegroupWindowRows, tiles of kmap.RegroupTileRows).
func regroupedOnHost(mask []uint64, order []int32) []int32 {
	out := make([]int32, len(order))
	for lo := 0; lo < len(order); lo += kmap.RegroupWindowRows {
		hi := min(len(order), lo+kmap.RegroupWindowRows)
		kmap.RegroupWindow(mask, order[lo:hi], kmap.RegroupTileRows, out[lo:hi])
	}
	return out
}
