//go:build cudaext

package cudaext

import (
	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// Hybrid gathers (an experiment, off unless FLEXGEMM_HYBRID_SHARE is set).
//
// In a masked tile, the taps that few of its rows hold cause most of the
// padding and carry few pairs: at RES 256 the taps under half a tile's rows
// cause 65 % of the padding and carry 2.4 % of the pairs (`bench padding
// -sparsetaps`, docs/PERF_NOTES.md, designs for the forty-seventh
// session). A hybrid tf32 gather (forward, or the input gradient of a
// submanifold map, which reads the same tables with mirrored weight taps)
// moves them out: the masked GEMM
// multiplies each tile's dense taps only, writing its float32 sums and the
// bias, then the sparse pairs run per tap (pertap.go's GEMM over slot
// tables) and spconv_pertap_reduce_rows adds their products, in tap order, to
// the rows that hold them (a row list: the other rows are not read). The
// sums are deterministic, in another order than the masked gather's (the
// dense taps and the bias, then the sparse taps).
//
// The tables are built on the device from the map's Gray order and masks
// (masks.cu, masks_hybrid_*), tile by tile as kmap.Masked.Hybrid splits
// them on the host (TestHybridTables compares the two): the dense taps'
// tile tables at once, so that the masked GEMM can be queued; the slot
// tables of the sparse pairs, whose size the host needs, behind a copy of
// their layout to page-locked memory that runHybrid reads after queuing
// the masked GEMM, by when the device has long passed it (no wait).
//
// The sparse tables are written by the first gather that uses them, and
// kept with the map for the others (the input gradients read them too).
//
// Measured (session 47, H200, docs/PERF_NOTES.md step 98): the gathers of
// RES 64 C 1024 −9 to −16 % against masked ones; RES 128 C 512 even at a
// half, worse at three quarters; RES 256 C 256 worse at every share (the
// sparse half costs more than the padding it removes). tf32 (64, 1024, 2)
// inference −1 to −4 % against the default grouped per-tap forwards, but
// its training peak goes over FlexGEMM's (the input gradients' product
// buffer at the weight gradients' peak). Hence off by default.

// hybridTables are the device tables of a hybrid gather for tiles of one
// height: the dense taps of each tile over the map's Gray order (tile
// tables, whose launch orders tileSchedule adds) and the slot tables of
// the sparse pairs (nil when there are none), or what is needed to write
// them (pending).
type hybridTables struct {
	share   float64 // the Device's hybridShare they were made for
	bm      int64
	dense   tileTables
	sparse  *perTapTables
	pending *hybridPending
}

// hybridPending is a hybrid split whose sparse slot tables are not written
// yet: hybrid_count's sparse taps per tile, the scans of the sparse pairs
// and listed rows, the layout info [V + 2] int64 (hybrid_taps) and its copy
// to the host, and the masks (computed for the split or taken from the
// Gray tables), all freed when the slot tables are written.
type hybridPending struct {
	sparseTaps, spoff, loff, info, mask rawBuf
	copy                                *segCopy
}

// hybrid reports whether the gather job j of masked algorithm alg on m runs
// hybrid, and returns its tables if so: forwards and the input gradients
// of submanifold maps, which gather through Nbr with mirrored weight taps
// (reverse: through the reverse table, never hybrid). Worker only.
func (e *Engine) hybrid(m *kmap.Map, reverse bool, alg sparse.Algorithm, j *gatherJob) (*hybridTables, bool, error) {
	if e.d.hybridShare <= 0 || reverse || !isMasked(alg) || j.math != kernels.TF32 || !perTapMap(m) ||
		m.V() > hybridMaxTaps || j.tile.BM > hybridMaxTileRows || int64(m.NOut)*int64(m.V()) >= 1<<31 {
		return nil, false, nil
	}
	me := e.entry(m)
	bm := int64(j.tile.BM)
	if h, ok := me.hybrid[bm]; ok {
		if h.share == e.d.hybridShare {
			return h, true, nil
		}
		// Made for another share (the tests change it): made again.
		e.freeHybrid(h)
		delete(me.hybrid, bm)
	}
	h, err := e.hybridTablesFor(m, bm)
	if err != nil {
		return nil, false, err
	}
	if me.hybrid == nil {
		me.hybrid = map[int64]*hybridTables{}
	}
	me.hybrid[bm] = h
	return h, true, nil
}

// hybridMaxTileRows is the tallest tile the hybrid kernels split (masks.cu:
// a warp holds kHybridGroups groups of 32 rows).
const hybridMaxTileRows = 256

// hybridMaxTaps is the largest kernel volume the hybrid kernels split (a
// row's mask is one 64-bit word).
const hybridMaxTaps = 64

// The split's layout (hybridMaxTaps + 2 int64) always fits a segCopy: a
// compile-time check.
const _ = uint(segCopyTaps + 1 - (hybridMaxTaps + 2))

// hybridTablesFor queues m's hybrid split for tiles of bm rows over its
// Gray order: the dense tile tables, and the counts and layout of the
// sparse pairs (pending, with their copy to the host). Worker only.
func (e *Engine) hybridTablesFor(m *kmap.Map, bm int64) (*hybridTables, error) {
	d := e.d
	g, err := e.grayTablesFor(m, false)
	if err != nil {
		return nil, err
	}
	nbr, err := e.nbrTable(m)
	if err != nil {
		return nil, err
	}
	n, V := int64(m.NOut), m.V()
	nt := ceilDiv(n, bm)
	h := &hybridTables{share: d.hybridShare, bm: bm}
	// The split takes the Gray tables' masks (as dropMasks would drop
	// them; a masked gather after it computes them again) or computes them.
	p := &hybridPending{mask: g.mask}
	g.mask = rawBuf{}
	h.pending = p
	fail := func(err error) (*hybridTables, error) {
		e.freeHybrid(h)
		return nil, err
	}
	if p.mask.ptr == 0 {
		if p.mask, err = d.tableMasks(nbr, int(n), V); err != nil {
			return fail(err)
		}
	}
	var unions, cnt, spc, listed rawBuf
	defer func() {
		for _, b := range []rawBuf{unions, cnt, spc, listed} {
			if b.ptr != 0 {
				d.freeTemp(b) // stream-ordered: reused only behind the kernels
			}
		}
	}()
	alloc := func(dst *rawBuf, bytes int64) error {
		var err error
		*dst, err = d.allocTemp(bytes)
		return err
	}
	for _, a := range []struct {
		dst   *rawBuf
		bytes int64
	}{
		{&h.dense.seg, 4 * (nt + 1)}, {&unions, 8 * nt}, {&cnt, 4 * nt},
		{&p.sparseTaps, 8 * nt}, {&spc, 4 * nt * int64(V)}, {&listed, 4 * nt},
		{&p.spoff, 4 * (nt*int64(V) + 1)}, {&p.loff, 4 * (nt + 1)}, {&p.info, 8 * int64(V+2)},
	} {
		if err := alloc(a.dst, a.bytes); err != nil {
			return fail(err)
		}
	}
	gr, b := d.elementwise(32 * nt) // a warp per tile
	if err := d.launch("masks_hybrid_count", gr, b, 0, p.mask.ptr, g.order.ptr, n, int32(V), int32(bm), nt, d.hybridShare,
		unions.ptr, cnt.ptr, p.sparseTaps.ptr, spc.ptr, listed.ptr); err != nil {
		return fail(err)
	}
	if err := d.unionTaps(&h.dense, unions.ptr, cnt.ptr, nt, 1, V); err != nil {
		return fail(err)
	}
	if err := d.scan(scanI32, spc.ptr, p.spoff.ptr, nt*int64(V), p.spoff.ptr+devPtr(4*nt*int64(V))); err != nil {
		return fail(err)
	}
	if err := d.scan(scanI32, listed.ptr, p.loff.ptr, nt, p.loff.ptr+devPtr(4*nt)); err != nil {
		return fail(err)
	}
	if err := d.launch("masks_hybrid_taps", dim3{X: 1}, dim3{X: 32}, 0, p.spoff.ptr, nt, int32(V), int32(bm), p.loff.ptr, p.info.ptr); err != nil {
		return fail(err)
	}
	if p.copy, err = d.segCopyFor(V + 2); err != nil {
		return fail(err)
	}
	if err := d.segCopyStart(p.copy, p.info.ptr, V+2); err != nil {
		return fail(err)
	}
	return h, nil
}

// finishHybrid writes h's pending sparse slot tables (after the masked
// GEMM is queued): it reads their layout (waiting only if the device has
// not passed its copy yet, a counted wait), allocates them and queues
// their fill. Worker only.
func (e *Engine) finishHybrid(m *kmap.Map, h *hybridTables) error {
	d, p := e.d, h.pending
	if p == nil {
		return nil
	}
	V, n, bm := m.V(), int64(m.NOut), h.bm
	nt := ceilDiv(n, bm)
	info, err := d.segCopyRead(p.copy, V+2)
	if err != nil {
		return err
	}
	tiles, listed := info[V], info[V+1]
	if tiles > 0 {
		pt := &perTapTables{rows: tiles * bm, tiles: tiles, firstTile: info[:V+1], listed: listed}
		l := perTapLayoutOf(pt.rows, n*int64(V), tiles)
		if pt.buf, err = d.allocTemp(4 * (l.words + listed)); err != nil {
			return err
		}
		pt.views(l)
		pt.rowList = pt.tbl + devPtr(4*l.words)
		h.sparse = pt
		if err := d.fillI32(pt.tbl, -1, l.slot+n*int64(V)); err != nil {
			return err
		}
		g, err := e.grayTablesFor(m, false)
		if err != nil {
			return err
		}
		nbr, err := e.nbrTable(m)
		if err != nil {
			return err
		}
		gr, b := d.elementwise(32 * nt)
		if err := d.launch("masks_hybrid_fill", gr, b, 0, p.mask.ptr, g.order.ptr, n, int32(V), int32(bm), nt,
			p.sparseTaps.ptr, p.spoff.ptr, p.loff.ptr, p.info.ptr, nbr, pt.tbl, pt.slot, pt.rowList); err != nil {
			return err
		}
		gr, b = d.elementwise(tiles + 1)
		if err := d.launch("masks_hybrid_tiles", gr, b, 0, p.info.ptr, int32(V), pt.seg, pt.taps); err != nil {
			return err
		}
	}
	e.freePending(h)
	return nil
}

// freePending frees h's pending split (stream-ordered) and hands its host
// copy back.
func (e *Engine) freePending(h *hybridTables) {
	p := h.pending
	if p == nil {
		return
	}
	for _, b := range []rawBuf{p.sparseTaps, p.spoff, p.loff, p.info, p.mask} {
		if b.ptr != 0 {
			e.d.freeTemp(b)
		}
	}
	if p.copy != nil {
		e.d.segCopies = append(e.d.segCopies, p.copy)
	}
	h.pending = nil
}

// freeHybrid frees the blocks of h. Worker only.
func (e *Engine) freeHybrid(h *hybridTables) {
	e.freePending(h)
	for _, b := range h.dense.bufs() {
		if b.ptr != 0 {
			e.d.freeTemp(b)
		}
	}
	if h.sparse != nil {
		e.d.freeTemp(h.sparse.buf)
	}
}

// runHybrid runs gather job j (gatherInput set j.hybrid): the masked GEMM
// over the dense taps into j.out with the bias, then the sparse pairs per
// tap, added by spconv_pertap_reduce_rows to the rows that hold them (the
// tables' row list). Worker only.
func (e *Engine) runHybrid(j gatherJob) error {
	h, m := j.hybrid, j.hybridMap
	j.hybrid, j.hybridMap = nil, nil
	if err := e.runGather(j); err != nil {
		return err
	}
	if err := e.finishHybrid(m, h); err != nil {
		return err
	}
	if h.sparse == nil {
		return nil
	}
	j.perTap, j.perTapGroups, j.perTapAccumulate, j.bias = h.sparse, 1, true, 0
	return e.runPerTap(j)
}
