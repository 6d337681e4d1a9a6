//go:build cudaext

package cudaext

import (
	"fmt"
	"slices"
	"unsafe"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// The weight gradient by pairs of taps (kernels/tappairs_sm90a.cu): a
// Hopper kernel that walks the forward's masked row tiles and multiplies
// two taps a stage, dy's rows read once for both, so that no pair list is
// built and a product reads a row and a half instead of two
// (docs/PERF_NOTES.md, session 69). The engine takes it for a masked
// 16-bit weight gradient where Device.tapPairs is on (EnvTapPairs).

// tapPairsParams mirrors fg::TapPairsParams (kernels/tappairs_sm90a.cu).
type tapPairsParams struct {
	X, DY, Part, Tbl, Order, TileBits uint64
	M, Co, Ci, V                      int64
	H, Nt, Splits                     int64
}

func (p *tapPairsParams) argBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p))
}

// useTapPairs reports whether a weight gradient of m in arithmetic math
// over co × ci channels by algorithm alg runs the tap-pairs kernel.
func (e *Engine) useTapPairs(m *kmap.Map, alg sparse.Algorithm, math kernels.Math, co, ci int64) bool {
	d := e.d
	return d.tapPairs && isMasked(alg) && math.ElemSize() == 2 && d.hopperTiles(math) && !e.noHopper.Load() &&
		d.moduleLoaded(tapPairsModule) && m.V() <= 32 && m.NOut > 0 && tapPairsEdge(co, ci) > 0
}

// moduleLoaded reports whether the kernel module name loaded.
func (d *Device) moduleLoaded(name string) bool {
	for _, mod := range d.modules {
		if mod.name == name {
			return mod.err == nil
		}
	}
	return false
}

// tapPairsRows returns the tile height of the masked tables the kernel
// walks for m: Device.tapPairsRows where set, else the least cached
// height of the forward's tables that is a multiple of the kernel's BK
// (the forward gathers built them: no masks are rebuilt), else 2·BK.
func (e *Engine) tapPairsRows(m *kmap.Map) int {
	if r := e.d.tapPairsRows; r > 0 {
		return r
	}
	var rows []int
	for k := range e.entry(m).tiles {
		if !k.reverse && k.rows%tapPairsBK == 0 {
			rows = append(rows, k.rows)
		}
	}
	if len(rows) == 0 {
		return 2 * tapPairsBK
	}
	return slices.Min(rows)
}

// tapPairsTables are what the tap-pairs kernel reads of a map besides
// its operands: the neighbour table, the masked tables of tile height H.
type tapPairsTables struct {
	tbl devPtr
	mt  maskedTables
	H   int
}

// tapPairsTablesFor derives m's tables for runTapPairs (on the main
// stream, as the pair lists are: an input gradient beside the weight
// gradient may read them). Worker only.
func (e *Engine) tapPairsTablesFor(m *kmap.Map) (tapPairsTables, error) {
	H := e.tapPairsRows(m)
	if H%tapPairsBK != 0 {
		return tapPairsTables{}, fmt.Errorf("cudaext: tap-pairs weight gradient: tile rows %d are not a multiple of %d", H, tapPairsBK)
	}
	tbl, err := e.nbrTable(m)
	if err != nil {
		return tapPairsTables{}, err
	}
	mt, err := e.maskedTablesFor(m, false, H)
	if err != nil {
		return tapPairsTables{}, err
	}
	e.dropMasks(m, false)
	return tapPairsTables{tbl: tbl, mt: mt, H: H}, nil
}

// runTapPairs computes the weight gradient out [co, V·ci] (out's dtype) of
// a map of V taps and rows output rows (tables t) from x [*, ci] and dy
// [rows, co] with the tap-pairs kernel, then sums its split slices in
// order (Engine.reduce). Worker only; the caller checked useTapPairs.
func (e *Engine) runTapPairs(t tapPairsTables, math kernels.Math, x, dy devPtr, rows, V, co, ci int64, out *Buffer) error {
	d := e.d
	H := int64(t.H)
	nt := ceilDiv(rows, H)
	edge := tapPairsEdge(co, ci)
	pairs := (V + 1) / 2
	cols := ceilDiv(co, edge) * ceilDiv(ci, edge)
	perSM := int64(1)
	if edge == 64 {
		perSM = 2
	}
	window := int64(windowPairsSplits(rows, co, ci, 2, co*V*ci, d.pairsWindowMin, d.pairsWindowRows))
	splits := tapPairsSplits(d.tapPairsSplits, nt, pairs, cols, co*V*ci, int64(d.info.SMs), tapPairsWaves*perSM, tapPairsPartBytes, window)
	if splits == 0 {
		return fmt.Errorf("cudaext: tap-pairs weight gradient: %d row tiles of %d rows exceed the kernel's splits", nt, H)
	}
	bits, err := d.allocTemp(nt * 4)
	if err != nil {
		return err
	}
	defer d.freeTemp(bits)
	g, b := d.elementwise(nt)
	if err := d.launch("spconv_tappairs_bits", g, b, 0, t.mt.tiles.seg.ptr, t.mt.tiles.taps.ptr, nt, bits.ptr); err != nil {
		return err
	}
	part, err := d.allocPartials(splits * co * V * ci)
	if err != nil {
		return err
	}
	defer d.freeTemp(part)
	p := tapPairsParams{
		X: uint64(d.addr(x)), DY: uint64(d.addr(dy)), Part: uint64(part.ptr), Tbl: uint64(t.tbl), Order: uint64(t.mt.order),
		TileBits: uint64(bits.ptr), M: rows, Co: co, Ci: ci, V: V, H: H, Nt: nt, Splits: splits,
	}
	name := tapPairsKernel(math, edge)
	if err := d.launch(name, dim3{X: int(pairs), Y: int(splits), Z: int(cols)}, dim3{X: tapPairsThreads(edge)}, tapPairsSmem(edge), &p); err != nil {
		return err
	}
	d.tapPairsLaunches++
	return e.reduce(part.ptr, out, 0, co, V*ci, int(splits))
}
