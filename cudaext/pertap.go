//go:build cudaext

package cudaext

import (
	"fmt"
	"math"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// Per-tap gathers.
//
// A masked gather multiplies every row of a 128-row tile at every tap of
// the tile's union. In a small submanifold map (a sphere shell of a few
// thousand voxels at C = 1024) nearly every row has its own mask, the
// unions hold nearly all 27 taps while a row has about 13, and the tiles
// multiply 1.8–2.7 times the useful products. A per-tap gather multiplies
// only the pairs: the rows of each tap form that tap's own row tiles
// (segments padded to the tile height, in tap order), one GEMM over the
// whole launch writes every pair's product row (slot), and
// spconv_pertap_reduce sums each output row's products over its taps in tap
// order, adding the bias: no atomics, the same bits every run. The slots
// are the pair lists' (which the weight gradient reads too), so the
// tables cost one kernel per map and tile height.
//
// The products are stored in the result's dtype before the sum: float32
// for tf32 (exact), float16 for float16 (each tap's product rounded once
// more, as the gather-scatter convolutions of other libraries do; the
// error stays within the float16 bound of the tests). bfloat16 keeps the
// masked gather (its 8-bit mantissa would lose too much). The input
// gradient of a submanifold map gathers through the same table with
// mirrored weight taps (gatherInput), so one set of tables serves both.
// The slot buffer is bounded (perTapMaxBytes, FLEXGEMM_PERTAP_MAX_MB), and
// a launch needs perTapMinBlocks blocks; otherwise the masked gather runs
// (perTapMaxMBDefault has the measurements).
//
// A tf32 forward gather of wide inputs (perTapGroupMinChannels) whose
// slots do not fit that limit runs in up to three groups of consecutive
// tiles instead: one GEMM launch and one reduction per group, each group's
// products in a buffer of at most perTapGroupOuts results, the reductions
// carrying each row's float32 running sum from group to group in the
// result itself and the last one adding the bias. A row's slots ascend
// with its taps, so the sums are made in tap order whatever the grouping:
// the same bits as one group. At most perTapMaxGroups groups: maps whose
// rows hold more than about eighteen taps each have little masked padding
// to save, and every group after the first reads and writes the running
// sums once more. Only tf32: its masked gathers are bound by the tensor
// pipe, so the padding they multiply costs its full time (H200, step 97:
// tf32 (64, 1024, 2) gathers 1.94 → 1.46 ms in four groups, plus 0.32 ms
// of reductions); the float16 gathers of the same map lost only 7 % to the
// padding, and the reductions made the inference step 21 % slower. Input
// gradients keep the single buffer: in a training step they run at the
// memory peak, where the weight gradients computed so far are alive.
//
// The tables are cached with the map but dropped by every weight gradient
// on it (dropPerTap), so that they are not part of a training step's
// memory peak.

// perTapMinBlocksPerSM: a per-tap gather needs at least this many blocks
// (row tiles × column tiles) per SM (Device.perTapMinBlocks). Measured
// (session 32): (8, 1024, 16), 112 blocks of 16 reduction steps on 132
// SMs, was slower per tap than masked; (16, 1024, 8), 380 blocks, faster.
const perTapMinBlocksPerSM = 2

// perTapMinChannels is the fewest input and output channels of a per-tap
// gather: below them the GEMM is short and the masked gather's one launch
// wins.
const perTapMinChannels = 256

// perTapGroupMaxRows is the most rows (voxels) of a map whose forward
// gathers may run per tap in groups: DeriveTables counts the pair lists of
// such maps ahead (mayRunPerTap) without knowing the channels, and larger
// shells have little padding in their masked tiles (1.11× the useful
// products at RES 256 against 1.41× at RES 64).
const perTapGroupMaxRows = 1 << 17

// perTapMap reports whether m's kind and shape allow per-tap gathers: a
// submanifold map with rows and an odd kernel volume of at least 3 (its
// pair lists mirrored around the centre tap).
func perTapMap(m *kmap.Map) bool {
	return m.Kind == kmap.Submanifold && m.V()%2 == 1 && m.V() >= 3 && m.NOut > 0
}

// perTapMayFit is the cheap filter before m's pair lists are counted: a
// slot buffer of cols columns of esz bytes may fit the limit. A map whose
// rows had a quarter of their taps each would already be over it (a sphere
// shell's have about half).
func (d *Device) perTapMayFit(m *kmap.Map, cols, esz int64) bool {
	return int64(m.NOut)*int64(m.V())*cols*esz <= 4*d.perTapMaxBytes
}

// perTapGroupsMayRun is the cheap filter of grouped per-tap forwards on
// m: groups are on and m has at most perTapGroupMaxRows rows.
func (d *Device) perTapGroupsMayRun(m *kmap.Map) bool {
	return d.perTapGroupOuts > 0 && m.NOut <= perTapGroupMaxRows
}

// mayRunPerTap reports whether some gather on m could run per tap (perTap
// with the fewest channels it takes, in 16-bit, or in groups, which tf32
// alone runs): DeriveTables then counts the pair lists ahead.
func (e *Engine) mayRunPerTap(m *kmap.Map) bool {
	return perTapMap(m) && (e.d.perTapMayFit(m, perTapMinChannels, 2) || e.TF32() && e.d.perTapGroupsMayRun(m))
}

// perTapTables are the slot tables of a submanifold map for tiles of bm
// rows (spconv_pertap_tables): views of one block.
type perTapTables struct {
	rows  int64 // slots: the taps' segments, each padded to a multiple of bm
	tiles int64 // rows / bm
	// firstTile[k]: tap k's first tile (V + 1 entries, the last = tiles;
	// host memory): the taps a group of tiles covers.
	firstTile []int64
	buf       rawBuf // the block holding the four tables below
	tbl       devPtr // [rows] int32: the input row of each slot, −1 for padding
	slot      devPtr // [n, V] int32: the slot of (row, tap), −1 where the row lacks the tap
	seg       devPtr // [tiles + 1] int32: tile t's taps are tile_taps[t] alone
	taps      devPtr // [tiles] int32: the tap of each tile
	// rowList [listed] int32 (in buf after the tables above), or 0: the
	// rows that hold slots, when only they are summed (a hybrid gather's
	// sparse pairs: the masked GEMM wrote every row's dense sum and bias).
	rowList devPtr
	listed  int64
}

// perTapGroupBytes is the slot buffer that a grouped per-tap forward of
// arithmetic mth on m with kc input and n output channels may take per
// group, or 0 where it may not run in groups (not tf32, too few input
// channels, too many rows, groups off).
func (d *Device) perTapGroupBytes(m *kmap.Map, mth kernels.Math, kc, n int64) int64 {
	if mth != kernels.TF32 || !d.perTapGroupsMayRun(m) || kc < d.perTapGroupMinChannels {
		return 0
	}
	return max(d.perTapMaxBytes, d.perTapGroupOuts*int64(m.NOut)*n*int64(mth.ElemSize()))
}

// perTap reports whether a gather of algorithm alg on m with arithmetic mth,
// tile t, kc input and n output channels runs per tap (forward: a forward
// gather, which may run in groups), and returns the map's slot tables and
// the number of groups if so. Worker only.
func (e *Engine) perTap(m *kmap.Map, alg sparse.Algorithm, mth kernels.Math, t kernels.Tile, kc, n int64, forward bool) (*perTapTables, int64, error) {
	d := e.d
	if alg != sparse.MaskedImplicitSplitK || !perTapMap(m) || (mth != kernels.F16 && mth != kernels.TF32) ||
		kc < perTapMinChannels || n < perTapMinChannels {
		return nil, 0, nil
	}
	esz := int64(mth.ElemSize())
	var groupBytes int64
	if forward {
		groupBytes = d.perTapGroupBytes(m, mth, kc, n)
	}
	single := d.perTapMaxBytes > 0 && d.perTapMayFit(m, n, esz)
	if !single && groupBytes == 0 {
		return nil, 0, nil
	}
	// A filter on the blocks before the pair lists are counted here too: a
	// tap has at most NOut pairs, so at most ceil(NOut / BM) row tiles.
	// (8, 1024, 16)'s 192 rows give at most 216 blocks, under
	// perTapMinBlocks: its inference no longer writes pair lists that no
	// gather would read (session 33: 2 % of that step; the counts
	// DeriveTables takes ahead for mayRunPerTap maps remain).
	bm := int64(t.BM)
	colTiles := ceilDiv(n, int64(t.BN))
	if int64(m.V())*ceilDiv(int64(m.NOut), bm)*colTiles < d.perTapMinBlocks {
		return nil, 0, nil
	}
	pl, err := e.pairTables(m)
	if err != nil {
		return nil, 0, err
	}
	// The slots: each tap's segment padded to whole tiles.
	_, tiles := pl.st.itersOf(bm)
	rows := tiles * bm
	groups := perTapGroupsOf(tiles, bm*n*esz, d.perTapMaxBytes, groupBytes)
	// Slots are int32 in the tables (and in spconv_pertap_tables).
	if rows > math.MaxInt32 || groups == 0 || ceilDiv(tiles, groups)*colTiles < d.perTapMinBlocks {
		return nil, 0, nil
	}
	pt, err := e.perTapTablesFor(m, pl, bm)
	if err != nil {
		return nil, 0, err
	}
	return pt, groups, nil
}

// perTapTablesFor returns m's slot tables for tiles of bm rows from its pair
// lists pl, building them if they are not cached. Worker only.
func (e *Engine) perTapTablesFor(m *kmap.Map, pl pairLists, bm int64) (*perTapTables, error) {
	me := e.entry(m)
	if pt, ok := me.perTap[bm]; ok {
		return pt, nil
	}
	d := e.d
	V, n := int64(m.V()), int64(m.NOut)
	// Tap segments padded to whole tiles; the launch covers the longest.
	longest, tiles := pl.st.itersOf(bm)
	pt := &perTapTables{rows: tiles * bm, tiles: tiles, firstTile: tapFirstTiles(pl.st.iters, bm)}
	if int64(len(pl.st.iters)) != V || pt.firstTile[V] != tiles {
		return nil, fmt.Errorf("cudaext: per-tap tables: %d tap segments of %d tiles for %d taps of %d tiles", len(pl.st.iters), pt.firstTile[len(pl.st.iters)], V, tiles)
	}
	// One block, one fill: the slot and slot-of-(row, tap) tables start at
	// −1 (padding, absent taps); the kernel writes every tile's entries.
	l := perTapLayoutOf(pt.rows, n*V, pt.tiles)
	var err error
	if pt.buf, err = d.allocTemp(4 * l.words); err != nil {
		return nil, err
	}
	pt.views(l)
	fail := func(err error) (*perTapTables, error) {
		d.freeTemp(pt.buf)
		return nil, err
	}
	if err := d.fillI32(pt.tbl, -1, l.slot+n*V); err != nil {
		return fail(err)
	}
	var half int64
	if pl.half {
		half = 1
	}
	g, blk := d.elementwise(longest * bm)
	g.Y = int(V)
	if err := d.launch("spconv_pertap_tables", g, blk, 0, pl.in, pl.out, pl.seg, half, n, V, bm,
		pt.tbl, pt.slot, pt.seg, pt.taps); err != nil {
		return fail(err)
	}
	if me.perTap == nil {
		me.perTap = map[int64]*perTapTables{}
	}
	me.perTap[bm] = pt
	return pt, nil
}

// dropPerTap frees the slot tables cached with m, if any. A weight
// gradient on m calls it first, on the main stream with the side stream
// joined (so the block is free at once): a training step's memory peak is
// at its weight gradients, where every one computed so far is alive, and
// the tables that the forwards and input gradients share would otherwise
// stay through all of them (session 32: 0.2 MiB over FlexGEMM's peak at
// (16, 1024, 8)). The next per-tap gather builds them again (one fill and
// one launch). Worker only.
func (e *Engine) dropPerTap(m *kmap.Map) {
	me, ok := e.maps.entries[keyOf(m)]
	if !ok {
		return
	}
	for bm, t := range me.perTap {
		e.d.freeTemp(t.buf)
		delete(me.perTap, bm)
	}
}

// runPerTap runs gather job j (gatherInput set j.perTap and j.perTapGroups)
// per tap: in each group of consecutive tiles, the slots' products into a
// temporary buffer of the result's dtype, then their sums into the rows'
// running sums, and with j.bias into j.out's j.M rows (pt.rowList's rows
// alone where it has a list) after the last group.
// The sums start at 0, or with j.perTapAccumulate at j.out's float32
// values (runHybrid). Worker only.
func (e *Engine) runPerTap(j gatherJob) error {
	d := e.d
	pt, rows, out, bias, groups := j.perTap, j.M, j.out, j.bias, max(j.perTapGroups, 1)
	sfx, ok := floatSuffix(out.dtype)
	if !ok {
		return fmt.Errorf("%w: cudaext: per-tap sums into %v", sparse.ErrDType, out.dtype)
	}
	// The running sums between groups live in the result: groups are
	// tf32's alone (perTapGroupBytes).
	if (groups > 1 || j.perTapAccumulate) && out.dtype != sparse.Float32 {
		return fmt.Errorf("%w: cudaext: per-tap gather in %d groups into %v (float32 only)", sparse.ErrDType, groups, out.dtype)
	}
	bm := pt.rows / pt.tiles
	per := ceilDiv(pt.tiles, groups) // tiles per group
	prod, err := d.allocTemp(per * bm * j.N * int64(j.math.ElemSize()))
	if err != nil {
		return err
	}
	defer d.freeTemp(prod)
	var vec int64
	if j.N%4 == 0 {
		vec = 1
	}
	// The sums of listed rows alone run in a kernel of their own: the
	// row list's indexing costs the plain sums registers (conv_aux.cu).
	reduce := "spconv_pertap_reduce_" + sfx
	if pt.rowList != 0 {
		rows, reduce = pt.listed, "spconv_pertap_reduce_rows_"+sfx
	}
	g, b := d.elementwise(ceilDiv(rows*j.N, 1+3*vec))
	gj := j
	gj.perTap, gj.perTapGroups, gj.perTapAccumulate, gj.hybrid, gj.hybridMap = nil, 0, false, nil, nil
	gj.slotTbl, gj.tileSeg, gj.order, gj.tileSched = true, pt.seg, 0, 0
	gj.splitAlg, gj.bias = false, 0
	gj.out = &Buffer{ptr: prod.ptr, dtype: out.dtype}
	d.perTapLaunches++
	d.perTapLastGroups = ceilDiv(pt.tiles, per)
	if d.perTapLastGroups > 1 {
		d.perTapGroupLaunches++
	}
	for t0 := int64(0); t0 < pt.tiles; t0 += per {
		t1 := min(t0+per, pt.tiles)
		// The group's tiles: its slots' input rows and taps; the tile
		// segments are the identity (one tap a tile), so the whole table
		// serves every group.
		gj.M, gj.tbl, gj.tileTp = (t1-t0)*bm, pt.tbl+devPtr(4*t0*bm), pt.taps+devPtr(4*t0)
		if err := e.runGather(gj); err != nil {
			return err
		}
		k0, k1 := pt.tapOf(t0), pt.tapOf(t1-1)+1
		var first, last int64
		if t0 == 0 && !j.perTapAccumulate {
			first = 1
		}
		gb := devPtr(0)
		if t1 == pt.tiles {
			last, gb = 1, bias
		}
		if err := d.launch(reduce, g, b, 0, prod.ptr, pt.slot, t0*bm, t1*bm, k0, k1, gb, out.ptr, out.ptr,
			pt.rowList, rows, j.N, j.V, vec, first, last); err != nil {
			return err
		}
	}
	return nil
}

// views points pt's tables into its block pt.buf, laid out as l.
func (pt *perTapTables) views(l perTapLayout) {
	pt.tbl = pt.buf.ptr
	pt.slot = pt.tbl + devPtr(4*l.slot)
	pt.seg = pt.tbl + devPtr(4*l.seg)
	pt.taps = pt.tbl + devPtr(4*l.taps)
}

// tapOf returns the tap of tile t (< tiles).
func (pt *perTapTables) tapOf(t int64) int64 { return tapOfTile(pt.firstTile, t) }
