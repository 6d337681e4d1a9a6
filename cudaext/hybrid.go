//go:build cudaext

package cudaext

import (
	"fmt"
	"slices"

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
// tables) and spconv_pertap_reduce adds their products, in tap order, to
// the rows that hold them (a row list: the other rows are not read). The
// sums are deterministic, in another order than the masked gather's (the
// dense taps and the bias, then the sparse taps).
//
// The tables are kmap.Masked.Hybrid's, computed on the host over the
// host's masked order and uploaded, so only maps whose host tables are
// loaded run hybrid: enough to time the gathers (BenchmarkConvTiles builds
// its maps on the host) before tables built on the device, which a step
// whose map is built on the GPU needs, are written.

// hybridTables are the device tables of a hybrid gather for tiles of one
// height: the host's masked order, the dense taps of each tile (tile
// tables, whose launch orders tileSchedule adds), and the slot tables of
// the sparse pairs (nil when there are none).
type hybridTables struct {
	share  float64 // the Device's hybridShare they were made for
	order  rawBuf
	dense  tileTables
	sparse *perTapTables
}

// hybrid reports whether the gather job j of masked algorithm alg on m runs
// hybrid, and returns its tables if so: forwards and the input gradients
// of submanifold maps, which gather through Nbr with mirrored weight taps
// (reverse: through the reverse table, never hybrid). Worker only.
func (e *Engine) hybrid(m *kmap.Map, reverse bool, alg sparse.Algorithm, j *gatherJob) (*hybridTables, bool, error) {
	if e.d.hybridShare <= 0 || reverse || !isMasked(alg) || j.math != kernels.TF32 || !perTapMap(m) || !m.Loaded() {
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
	h, err := e.hybridTablesFor(m, int(bm))
	if err != nil {
		return nil, false, err
	}
	if me.hybrid == nil {
		me.hybrid = map[int64]*hybridTables{}
	}
	me.hybrid[bm] = h
	return h, true, nil
}

// hybridTablesFor computes m's hybrid split for tiles of bm rows on the
// host and uploads its tables. Worker only.
func (e *Engine) hybridTablesFor(m *kmap.Map, bm int) (*hybridTables, error) {
	d := e.d
	ms := m.Masked()
	hs := ms.Hybrid(bm, d.hybridShare)
	V, n := m.V(), m.NOut
	h := &hybridTables{share: d.hybridShare}
	var err error
	fail := func(err error) (*hybridTables, error) {
		e.freeHybrid(h)
		return nil, err
	}
	if h.order, err = uploadSlice(d, ms.Order); err != nil {
		return fail(err)
	}
	if h.dense.seg, err = uploadSlice(d, hs.Dense.Seg); err != nil {
		return fail(err)
	}
	if h.dense.taps, err = uploadSlice(d, hs.Dense.Taps); err != nil {
		return fail(err)
	}
	if len(hs.Sparse) == 0 {
		return h, nil
	}
	// The sparse pairs' slots: tap k's pairs in its segment, padded to
	// whole tiles of bm slots, in one block laid out as perTapTablesFor's.
	pairs := make([]int64, V)
	for k := range V {
		pairs[k] = hs.TapSeg[k+1] - hs.TapSeg[k]
	}
	first := tapFirstTiles(pairs, int64(bm))
	tiles := first[V]
	pt := &perTapTables{rows: tiles * int64(bm), tiles: tiles, firstTile: first}
	l := perTapLayoutOf(pt.rows, int64(n)*int64(V), tiles)
	host := slices.Repeat([]int32{-1}, int(l.words))
	for k := range V {
		for i, r := range hs.Sparse[hs.TapSeg[k]:hs.TapSeg[k+1]] {
			s := first[k]*int64(bm) + int64(i)
			in := m.Nbr[int(r)*V+k]
			if in < 0 {
				return fail(fmt.Errorf("cudaext: hybrid tables: row %d has no tap %d", r, k))
			}
			host[s] = in
			host[l.slot+int64(r)*int64(V)+int64(k)] = int32(s)
		}
		for t := first[k]; t < first[k+1]; t++ {
			host[l.taps+t] = int32(k)
		}
	}
	for t := int64(0); t <= tiles; t++ {
		host[l.seg+t] = int32(t)
	}
	// The rows that hold sparse pairs, ascending, after the tables: the
	// reduction adds their sums alone.
	held := make([]bool, n)
	for _, r := range hs.Sparse {
		held[r] = true
	}
	for r, ok := range held {
		if ok {
			host = append(host, int32(r))
		}
	}
	pt.listed = int64(len(host)) - l.words
	if pt.buf, err = uploadSlice(d, host); err != nil {
		return fail(err)
	}
	pt.views(l)
	pt.rowList = pt.tbl + devPtr(4*l.words)
	h.sparse = pt
	return h, nil
}

// freeHybrid frees the blocks of h. Worker only.
func (e *Engine) freeHybrid(h *hybridTables) {
	bufs := append([]rawBuf{h.order}, h.dense.bufs()...)
	if h.sparse != nil {
		bufs = append(bufs, h.sparse.buf)
	}
	for _, b := range bufs {
		e.d.freeTemp(b)
	}
}

// runHybrid runs gather job j (gatherInput set j.hybrid): the masked GEMM
// over the dense taps into j.out with the bias, then the sparse pairs per
// tap, added by spconv_pertap_reduce to the rows that hold them (the
// tables' row list). Worker only.
func (e *Engine) runHybrid(j gatherJob) error {
	pt := j.hybrid
	j.hybrid = nil
	if err := e.runGather(j); err != nil {
		return err
	}
	j.perTap, j.perTapGroups, j.perTapAccumulate, j.bias = pt, 1, true, 0
	return e.runPerTap(j)
}
