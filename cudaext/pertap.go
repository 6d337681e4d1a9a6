//go:build cudaext

package cudaext

import (
	"fmt"

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
// a launch needs perTapMinBlocks blocks; otherwise the masked gather runs.
// Off by default: where it is faster (RES 16 C 1024) its cached slot
// tables raise a training step's memory peak above FlexGEMM's by a MiB
// digit (perTapMaxMBDefault has the measurements).

// perTapMinBlocksPerSM: a per-tap gather needs at least this many blocks
// (row tiles × column tiles) per SM (Device.perTapMinBlocks). Measured
// (session 32): (8, 1024, 16), 112 blocks of 16 reduction steps on 132
// SMs, was slower per tap than masked; (16, 1024, 8), 380 blocks, faster.
const perTapMinBlocksPerSM = 2

// perTapMinChannels is the fewest input and output channels of a per-tap
// gather: below them the GEMM is short and the masked gather's one launch
// wins.
const perTapMinChannels = 256

// mayRunPerTap reports whether some gather on m could run per tap (perTap
// with the fewest channels it takes, in 16-bit): DeriveTables then counts
// the pair lists ahead.
func (e *Engine) mayRunPerTap(m *kmap.Map) bool {
	return m.Kind == kmap.Submanifold && m.V()%2 == 1 && m.V() >= 3 && m.NOut > 0 &&
		int64(m.NOut)*int64(m.V())*perTapMinChannels*2 <= 4*e.d.perTapMaxBytes
}

// perTapTables are the slot tables of a submanifold map for tiles of bm
// rows (spconv_pertap_tables).
type perTapTables struct {
	rows  int64  // slots: the taps' segments, each padded to a multiple of bm
	tiles int64  // rows / bm
	tbl   rawBuf // [rows] int32: the input row of each slot, −1 for padding
	slot  rawBuf // [n, V] int32: the slot of (row, tap), −1 where the row lacks the tap
	seg   rawBuf // [tiles + 1] int32: tile t's taps are tile_taps[t] alone
	taps  rawBuf // [tiles] int32: the tap of each tile
}

// perTapRows returns the slots of a map whose taps have the given pair
// counts, each tap's segment padded to a multiple of bm.
func perTapRows(iters []int64, bm int64) int64 {
	var n int64
	for _, c := range iters {
		n += ceilDiv(c, bm) * bm
	}
	return n
}

// perTap reports whether a gather of algorithm alg on m with arithmetic mth,
// tile t, kc input and n output channels runs per tap, and returns the map's
// slot tables if so. Worker only.
func (e *Engine) perTap(m *kmap.Map, alg sparse.Algorithm, mth kernels.Math, t kernels.Tile, kc, n int64) (*perTapTables, bool, error) {
	d := e.d
	if alg != sparse.MaskedImplicitSplitK || m.Kind != kmap.Submanifold || m.V()%2 == 0 || m.V() < 3 || m.NOut == 0 ||
		(mth != kernels.F16 && mth != kernels.TF32) || kc < perTapMinChannels || n < perTapMinChannels ||
		d.perTapMaxBytes <= 0 {
		return nil, false, nil
	}
	// A cheap filter before the pair lists are counted here: a map whose
	// rows had a quarter of their taps each would already be over the
	// limit (a sphere shell's have about half; mayRunPerTap agrees).
	if int64(m.NOut)*int64(m.V())*n*int64(mth.ElemSize()) > 4*d.perTapMaxBytes {
		return nil, false, nil
	}
	pl, err := e.pairTables(m)
	if err != nil {
		return nil, false, err
	}
	bm := int64(t.BM)
	rows := perTapRows(pl.st.iters, bm)
	if rows*n*int64(mth.ElemSize()) > d.perTapMaxBytes || rows/bm*ceilDiv(n, int64(t.BN)) < d.perTapMinBlocks {
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
	pt := &perTapTables{rows: perTapRows(pl.st.iters, bm)}
	pt.tiles = pt.rows / bm
	fail := func(err error) (*perTapTables, error) {
		for _, r := range []rawBuf{pt.tbl, pt.slot, pt.seg, pt.taps} {
			if r.ptr != 0 {
				d.freeTemp(r)
			}
		}
		return nil, err
	}
	var err error
	for _, b := range []struct {
		r     *rawBuf
		words int64
	}{{&pt.tbl, pt.rows}, {&pt.slot, n * V}, {&pt.seg, pt.tiles + 1}, {&pt.taps, pt.tiles}} {
		if *b.r, err = d.allocTemp(4 * b.words); err != nil {
			return fail(err)
		}
		if err := d.fillI32(b.r.ptr, -1, b.words); err != nil {
			return fail(err)
		}
	}
	var half int64
	if pl.half {
		half = 1
	}
	longest := int64(0)
	for _, c := range pl.st.iters {
		longest = max(longest, ceilDiv(c, bm)*bm)
	}
	g, blk := d.elementwise(longest)
	g.Y = int(V)
	if err := d.launch("spconv_pertap_tables", g, blk, 0, pl.in, pl.out, pl.seg, half, n, V, bm,
		pt.tbl.ptr, pt.slot.ptr, pt.seg.ptr, pt.taps.ptr); err != nil {
		return fail(err)
	}
	if me.perTap == nil {
		me.perTap = map[int64]*perTapTables{}
	}
	me.perTap[bm] = pt
	return pt, nil
}

// runPerTap runs gather job j (its operands, weight, mirror and
// transposition set by the caller, its table and masked fields unused)
// per tap: the slots' products into a temporary [pt.rows, j.N] buffer of
// the result's dtype, then their sums with j.bias into j.out. Worker only.
func (e *Engine) runPerTap(j gatherJob, pt *perTapTables, m *kmap.Map) error {
	d := e.d
	out, bias := j.out, j.bias
	prod, err := d.allocTemp(pt.rows * j.N * int64(j.math.ElemSize()))
	if err != nil {
		return err
	}
	defer d.freeTemp(prod)
	j.M, j.tbl, j.slotTbl, j.order, j.tileSeg, j.tileTp, j.tileSched = pt.rows, pt.tbl.ptr, true, 0, pt.seg.ptr, pt.taps.ptr, 0
	j.splitAlg, j.bias = false, 0
	j.out = &Buffer{ptr: prod.ptr, dtype: out.dtype}
	d.perTapLaunches++
	if err := e.runGather(j); err != nil {
		return err
	}
	rows := int64(m.NOut) // = NIn: a submanifold map
	sfx, ok := floatSuffix(out.dtype)
	if !ok {
		return fmt.Errorf("%w: cudaext: per-tap sums into %v", sparse.ErrDType, out.dtype)
	}
	var vec int64
	if j.N%4 == 0 {
		vec = 1
	}
	g, b := d.elementwise(ceilDiv(rows*j.N, 1+3*vec))
	return d.launch("spconv_pertap_reduce_"+sfx, g, b, 0, prod.ptr, pt.slot.ptr, bias, out.ptr, rows, j.N, j.V, vec)
}
