//go:build cudaext

package cudaext

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// defaultTapGrad is the multi-tap weight-gradient configuration the fixed
// heuristic takes (EnvTapWeightGrad can force another).
var defaultTapGrad = kernels.TapGrads[0]

// tapGradWaves is the number of waves of resident blocks the multi-tap
// weight gradient's row split aims at; tapGradMinChunks is
// the fewest row chunks a split gets.
const (
	tapGradWaves     = 2
	tapGradMinChunks = 8
)

// tapGradFor reports whether the weight gradient with options o,
// algorithm alg, arithmetic mth and ci input, co output channels runs the
// multi-tap kernel (kernels.TapGrad, tapgrad.cuh) and with which
// configuration and row order (the engine's setting): Hopper kernels loaded and allowed, 16-bit
// arithmetic, both channel counts at most kernels.TapGradMaxChannels and
// multiples of 8 (16-byte rows), no forced tile (a forced tile names a
// pairs or im2col kernel) and an implicit algorithm.
func (e *Engine) tapGradFor(o Options, alg sparse.Algorithm, mth kernels.Math, ci, co int64) (kernels.TapGrad, tapWGradSetting, bool) {
	s := e.tapWGrad.Load()
	switch {
	case !s.on, o.Tile != "", alg == sparse.Explicit, !e.d.tapGrad, !e.hopperDefaults(mth),
		mth != kernels.F16 && mth != kernels.BF16,
		ci > kernels.TapGradMaxChannels, co > kernels.TapGradMaxChannels, ci%8 != 0, co%8 != 0, ci == 0, co == 0:
		return kernels.TapGrad{}, tapWGradSetting{}, false
	}
	c := s.cfg
	if c.BK == 0 {
		c = defaultTapGrad
	}
	return c, *s, true
}

// tapGradSplits returns the row splits of a multi-tap weight gradient of
// groups tap groups over chunks row chunks for about blocks blocks
// (tapGradWaves waves of the blocks the GPU holds at once), at least
// tapGradMinChunks chunks per split, at most 65535 splits (the grid's y)
// and pairsPartBytes of float32 partials of outElems elements each.
func tapGradSplits(groups, chunks, outElems, blocks int64) int {
	s := ceilDiv(blocks, groups)
	s = min(s, max(chunks/tapGradMinChunks, 1), 65535)
	if outElems > 0 {
		s = min(s, max(pairsPartBytes/(4*outElems), 1))
	}
	return int(max(s, 1))
}

// runTapGrad computes out [co, V·ci] = the weight gradient of x [*, ci]
// and dy [m.NOut, co] over m's neighbour table with the multi-tap kernel
// c, rows in the order of setting s (tapRowOrder): float32 partials per row split, summed in split order by
// spconv_reduce_* (rounding to out's dtype). Worker only.
func (e *Engine) runTapGrad(c kernels.TapGrad, mth kernels.Math, m *kmap.Map, s tapWGradSetting, x, dy devPtr, ci, co int64, out *Buffer) error {
	d := e.d
	V, M := int64(m.V()), int64(m.NOut)
	nbr, err := e.nbrTable(m)
	if err != nil {
		return err
	}
	order, err := e.tapRowOrder(m, s)
	if err != nil {
		return err
	}
	groups := ceilDiv(V, int64(c.Taps()))
	outElems := co * V * ci
	splits := tapGradSplits(groups, ceilDiv(M, int64(c.BK)), outElems, int64(tapGradWaves*c.BlocksPerSM()*d.info.SMs))
	p := tapGradParams{
		DY: uint64(d.addr(dy)), X: uint64(d.addr(x)), Tbl: uint64(d.addr(nbr)), Order: uint64(order),
		M: M, Co: co, Ci: ci, V: V, Splits: int64(splits),
	}
	direct := splits == 1 && out.dtype == sparse.Float32
	var part rawBuf
	if direct {
		p.Part = uint64(out.ptr)
	} else {
		if part, err = d.allocTemp(int64(splits) * outElems * 4); err != nil {
			return err
		}
		defer d.freeTemp(part)
		p.Part = uint64(part.ptr)
	}
	if groups > 1<<31-1 {
		return fmt.Errorf("%w: kernel volume %d too large for the multi-tap weight gradient", sparse.ErrShape, V)
	}
	name := c.Name(mth)
	if err := d.launch(name, dim3{X: int(groups), Y: splits}, dim3{X: c.Threads()}, c.Smem(), &p); err != nil {
		return err
	}
	if direct {
		return nil
	}
	return e.reduce(part.ptr, out, 0, co, V*ci, splits)
}

// tapRowOrder returns the device row order of m's multi-tap weight
// gradient under setting s: 0 (stored order) for tapOrderRows or an empty
// map, the forward Gray order for tapOrderGray, and for tapOrderWindow the
// Gray order stably sorted by window of 2^windowBits stored rows (rows
// next to each other in storage, and so in space, stay together, and
// within a window rows of one tap set are adjacent), computed once per
// map. Worker only.
func (e *Engine) tapRowOrder(m *kmap.Map, s tapWGradSetting) (devPtr, error) {
	n := int64(m.NOut)
	if s.order == tapOrderRows || n == 0 {
		return 0, nil
	}
	g, err := e.grayTablesFor(m, false)
	if err != nil || s.order == tapOrderGray {
		return g.order.ptr, err
	}
	me := e.entry(m)
	if me.tapOrder.ptr != 0 && me.tapOrderBits == s.windowBits {
		return me.tapOrder.ptr, nil
	}
	d := e.d
	keys, err := d.allocTemp(n * 4)
	if err != nil {
		return 0, err
	}
	defer d.freeTemp(keys)
	vals, err := d.allocTemp(n * 4)
	if err != nil {
		return 0, err
	}
	gr, b := d.elementwise(n)
	if err := d.launch("tapgrad_window_keys", gr, b, 0, g.order.ptr, keys.ptr, vals.ptr, n, int32(s.windowBits)); err != nil {
		d.freeTemp(vals)
		return 0, err
	}
	if err := d.radixSort(keys.ptr, vals.ptr, n, false, bitLen(uint64(n-1)>>s.windowBits), false); err != nil {
		d.freeTemp(vals)
		return 0, err
	}
	d.freeTemp(me.tapOrder)
	me.tapOrder, me.tapOrderBits = vals, s.windowBits
	return vals.ptr, nil
}
