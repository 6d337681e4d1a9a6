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
// (perTapMaxMBDefault has the measurements). The tables are cached with
// the map but dropped by every weight gradient on it (dropPerTap), so that
// they are not part of a training step's memory peak.

// perTapMinBlocksPerSM: a per-tap gather needs at least this many blocks
// (row tiles × column tiles) per SM (Device.perTapMinBlocks). Measured
// (session 32): (8, 1024, 16), 112 blocks of 16 reduction steps on 132
// SMs, was slower per tap than masked; (16, 1024, 8), 380 blocks, faster.
const perTapMinBlocksPerSM = 2

// perTapMinChannels is the fewest input and output channels of a per-tap
// gather: below them the GEMM is short and the masked gather's one launch
// wins.
const perTapMinChannels = 256

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

// mayRunPerTap reports whether some gather on m could run per tap (perTap
// with the fewest channels it takes, in 16-bit): DeriveTables then counts
// the pair lists ahead.
func (e *Engine) mayRunPerTap(m *kmap.Map) bool {
	return perTapMap(m) && e.d.perTapMayFit(m, perTapMinChannels, 2)
}

// perTapTables are the slot tables of a submanifold map for tiles of bm
// rows (spconv_pertap_tables): views of one block.
type perTapTables struct {
	rows  int64  // slots: the taps' segments, each padded to a multiple of bm
	tiles int64  // rows / bm
	buf   rawBuf // the block holding the four tables below
	tbl   devPtr // [rows] int32: the input row of each slot, −1 for padding
	slot  devPtr // [n, V] int32: the slot of (row, tap), −1 where the row lacks the tap
	seg   devPtr // [tiles + 1] int32: tile t's taps are tile_taps[t] alone
	taps  devPtr // [tiles] int32: the tap of each tile
}

// perTap reports whether a gather of algorithm alg on m with arithmetic mth,
// tile t, kc input and n output channels runs per tap, and returns the map's
// slot tables if so. Worker only.
func (e *Engine) perTap(m *kmap.Map, alg sparse.Algorithm, mth kernels.Math, t kernels.Tile, kc, n int64) (*perTapTables, bool, error) {
	d := e.d
	if alg != sparse.MaskedImplicitSplitK || !perTapMap(m) || (mth != kernels.F16 && mth != kernels.TF32) ||
		kc < perTapMinChannels || n < perTapMinChannels || d.perTapMaxBytes <= 0 ||
		!d.perTapMayFit(m, n, int64(mth.ElemSize())) {
		return nil, false, nil
	}
	// A filter on the blocks before the pair lists are counted here too: a
	// tap has at most NOut pairs, so at most ceil(NOut / BM) row tiles.
	// (8, 1024, 16)'s 192 rows give at most 216 blocks, under
	// perTapMinBlocks: its inference no longer writes pair lists that no
	// gather would read (session 33: 2 % of that step; the counts
	// DeriveTables takes ahead for mayRunPerTap maps remain).
	bm := int64(t.BM)
	if int64(m.V())*ceilDiv(int64(m.NOut), bm)*ceilDiv(n, int64(t.BN)) < d.perTapMinBlocks {
		return nil, false, nil
	}
	pl, err := e.pairTables(m)
	if err != nil {
		return nil, false, err
	}
	// The slots: each tap's segment padded to whole tiles.
	_, tiles := pl.st.itersOf(bm)
	rows := tiles * bm
	// Slots are int32 in the tables (and in spconv_pertap_tables).
	if rows > math.MaxInt32 || rows*n*int64(mth.ElemSize()) > d.perTapMaxBytes || tiles*ceilDiv(n, int64(t.BN)) < d.perTapMinBlocks {
		return nil, false, nil
	}
	pt, err := e.perTapTablesFor(m, pl, bm)
	return pt, err == nil, err
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
	pt := &perTapTables{rows: tiles * bm, tiles: tiles}
	// One block, one fill: the slot and slot-of-(row, tap) tables start at
	// −1 (padding, absent taps); the kernel writes every tile's entries.
	// Each table starts on a 256-byte boundary, as a block of its own would.
	words := func(n int64) int64 { return (n + 63) &^ 63 }
	filled := words(pt.rows) + n*V
	var err error
	if pt.buf, err = d.allocTemp(4 * (words(filled) + words(pt.tiles+1) + pt.tiles)); err != nil {
		return nil, err
	}
	pt.tbl = pt.buf.ptr
	pt.slot = pt.tbl + devPtr(4*words(pt.rows))
	pt.seg = pt.tbl + devPtr(4*words(filled))
	pt.taps = pt.seg + devPtr(4*words(pt.tiles+1))
	fail := func(err error) (*perTapTables, error) {
		d.freeTemp(pt.buf)
		return nil, err
	}
	if err := d.fillI32(pt.tbl, -1, filled); err != nil {
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

// runPerTap runs gather job j (gatherInput set j.perTap) per tap: the
// slots' products into a temporary [pt.rows, j.N] buffer of the result's
// dtype, then their sums with j.bias into j.out's j.M rows. Worker only.
func (e *Engine) runPerTap(j gatherJob) error {
	d := e.d
	pt, rows, out, bias := j.perTap, j.M, j.out, j.bias
	prod, err := d.allocTemp(pt.rows * j.N * int64(j.math.ElemSize()))
	if err != nil {
		return err
	}
	defer d.freeTemp(prod)
	j.perTap, j.M, j.tbl, j.slotTbl, j.tileSeg, j.tileTp = nil, pt.rows, pt.tbl, true, pt.seg, pt.taps
	j.splitAlg, j.bias = false, 0
	j.out = &Buffer{ptr: prod.ptr, dtype: out.dtype}
	d.perTapLaunches++
	if err := e.runGather(j); err != nil {
		return err
	}
	sfx, ok := floatSuffix(out.dtype)
	if !ok {
		return fmt.Errorf("%w: cudaext: per-tap sums into %v", sparse.ErrDType, out.dtype)
	}
	var vec int64
	if j.N%4 == 0 {
		vec = 1
	}
	g, b := d.elementwise(ceilDiv(rows*j.N, 1+3*vec))
	return d.launch("spconv_pertap_reduce_"+sfx, g, b, 0, prod.ptr, pt.slot, bias, out.ptr, rows, j.N, j.V, vec)
}
