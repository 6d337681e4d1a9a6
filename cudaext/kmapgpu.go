//go:build cudaext

package cudaext

// Kernel maps built on the GPU (kernels/kmap.cu, kernels/masks.cu).
//
// # Design
//
// The builders (SubmanifoldMap, StridedMap, TransposedMap, InverseMap)
// take device coordinates, hash them on the device, generate output
// coordinates where needed (candidate keys → radix sort → unique), and
// fill the neighbour table Nbr and the reverse table Rev on the device.
// Both tables are registered in the engine's map cache under the returned
// *kmap.Map, so convolutions and pooling on this engine never upload them.
//
// The returned Map is a complete kmap.Map: its host slices (InCoords,
// OutCoords, Nbr) are downloaded, because the package API (sparse.Conv and
// friends check len(m.Nbr)), the CPU engine and every consumer of
// kmap.Map read them. The download costs about NOut·V·4 bytes over PCIe;
// the device-only part of a build is what the benchmarks time. The host
// map's derived structures (m.Reverse(), m.Pairs(), m.Masked()) are
// computed lazily on the CPU only if host code asks for them; the device
// has its own copies.
//
// Derived device tables (pair lists, masks with Gray order and tile tap
// unions, for the forward and the reverse table) are computed on the
// device from the device Nbr by DeriveTables, or one at a time by the
// worker-only deriveRev/derivePairs/deriveMasked, which have the
// signatures of the map cache's revTable/pairTables/maskedTablesFor and
// can replace their CPU-and-upload paths.
//
// Every table equals the CPU builders' (package kmap) entry for entry; the
// errors name the same rows.

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// convArg mirrors fgk::Conv (kernels/kmap.cu).
type convArg struct {
	K, S, P, D [3]int32
	V, pad     int32
}

func convOf(c grid.Conv) *convArg {
	a := &convArg{V: int32(c.Volume())}
	for i := range 3 {
		a.K[i], a.S[i], a.P[i], a.D[i] = int32(c.Kernel[i]), int32(c.Stride[i]), int32(c.Padding[i]), int32(c.Dilation[i])
	}
	return a
}

func (a *convArg) argBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(a)), unsafe.Sizeof(*a))
}

// maxTable bounds NOut·V as kmap does.
const maxTable = 1 << 40

// devMap is the device part of a map built here. Worker only.
type devMap struct {
	nIn, nOut int
	V         int
	out       rawBuf // generated output coordinates [nOut, 4] (strided without given outputs, transposed)
	nbr, rev  rawBuf
}

func (d *Device) freeDevMap(dm *devMap) {
	for _, r := range []rawBuf{dm.out, dm.nbr, dm.rev} {
		if r.ptr != 0 {
			d.freeTemp(r)
		}
	}
}

func tooLarge(op string, format string, args ...any) error {
	return &coordError{msg: fmt.Sprintf("cudaext: "+op+": "+format, args...), kinds: []error{kmap.ErrTooLarge, sparse.ErrIndexOverflow}}
}

func checkTable(op string, nOut, V int) error {
	if nOut >= math.MaxInt32 {
		return tooLarge(op, "%d output rows overflow 32-bit row indices", nOut)
	}
	if uint64(nOut)*uint64(V) > maxTable {
		return tooLarge(op, "a table of %d rows × %d taps", nOut, V)
	}
	return nil
}

// checkExtent validates ext and requires every dimension to fit int32
// coordinates, as kmap does; what names the grid in the message.
func checkExtent(op, what string, ext grid.Extent) error {
	if err := ext.Validate(); err != nil {
		return fmt.Errorf("cudaext: %s: %s%w", op, what, err)
	}
	for _, d := range [4]int{ext.Batch, ext.X, ext.Y, ext.Z} {
		if d > math.MaxInt32 {
			return tooLarge(op, "%s%v has a dimension beyond int32 coordinates", what, ext)
		}
	}
	return nil
}

// allocTable returns a block for an [n, V] int32 table (the zero page when
// empty).
func (d *Device) allocTable(n, V int) (rawBuf, error) {
	if n*V == 0 {
		return rawBuf{ptr: d.zeroPage}, nil
	}
	return d.allocTemp(int64(n) * int64(V) * 4)
}

// buildNbr fills dm.nbr for the outputs at out (nOut rows) from the input
// table t: fine maps (submanifold, strided) or coarse (transposed).
func (d *Device) buildNbr(dm *devMap, out devPtr, in grid.Extent, conv grid.Conv, t *devTable, coarse bool) error {
	var err error
	if dm.nbr, err = d.allocTable(dm.nOut, dm.V); err != nil {
		return err
	}
	total := int64(dm.nOut) * int64(dm.V)
	if total == 0 {
		return nil
	}
	name := "kmap_nbr_fine"
	if coarse {
		name = "kmap_nbr_coarse"
	}
	g, b := d.elementwise(total)
	return d.launch(name, g, b, 0, out, int64(dm.nOut), extOf(in), convOf(conv), t.arg(), dm.nbr.ptr)
}

// buildRev fills dm.rev from dm.nbr: the mirror for submanifold maps, a
// scatter otherwise.
func (d *Device) buildRev(dm *devMap, mirror bool) error {
	var err error
	if dm.rev, err = d.allocTable(dm.nIn, dm.V); err != nil {
		return err
	}
	return d.reverse(dm.nbr.ptr, dm.rev.ptr, dm.nIn, dm.nOut, dm.V, mirror)
}

// reverse writes the [nIn, V] reverse table of nbr [nOut, V] to rev.
func (d *Device) reverse(nbr, rev devPtr, nIn, nOut, V int, mirror bool) error {
	if nIn*V == 0 {
		return nil
	}
	if mirror {
		g, b := d.elementwise(int64(nIn) * int64(V))
		return d.launch("kmap_rev_mirror", g, b, 0, nbr, int64(nIn), int32(V), rev)
	}
	if err := d.fillI32(rev, -1, int64(nIn)*int64(V)); err != nil {
		return err
	}
	if nOut == 0 {
		return nil
	}
	g, b := d.elementwise(int64(nOut) * int64(V))
	return d.launch("kmap_rev_scatter", g, b, 0, nbr, int64(nOut), int32(V), rev)
}

// submanifold builds the device tables of a submanifold map over c.
func (d *Device) submanifold(op string, c deviceCoords, ext grid.Extent, conv grid.Conv) (*devMap, error) {
	V := conv.Volume()
	if err := checkTable(op, c.n, V); err != nil {
		return nil, err
	}
	t, err := d.hashCoords(c.ptr, int64(c.n), ext, 0, false, op+": ")
	if err != nil {
		return nil, err
	}
	defer d.freeTable(t)
	dm := &devMap{nIn: c.n, nOut: c.n, V: V}
	if err := d.buildNbr(dm, c.ptr, ext, conv, t, false); err != nil {
		d.freeDevMap(dm)
		return nil, err
	}
	if err := d.buildRev(dm, true); err != nil {
		d.freeDevMap(dm)
		return nil, err
	}
	return dm, nil
}

// reached generates the output sites of a strided (coarse) or transposed
// (fine) map: every site of out that an input reaches through a tap,
// sorted by key, as [M, 4] coordinates.
func (d *Device) reached(op string, c deviceCoords, out grid.Extent, conv grid.Conv, fine bool) (rawBuf, int, error) {
	V := int64(conv.Volume())
	n := int64(c.n) * V
	if n == 0 {
		return rawBuf{ptr: d.zeroPage}, 0, nil
	}
	if n > math.MaxInt32 {
		return rawBuf{}, 0, tooLarge(op, "%d inputs × %d taps = %d output candidates exceed 2^31 − 1", c.n, V, n)
	}
	sites := out.Sites()
	wide := sites > math.MaxUint32
	ksize, suffix := int64(4), "u32"
	var sent any = uint32(sites)
	if wide {
		ksize, suffix, sent = 8, "u64", sites
	}
	keys, err := d.allocTemp(n * ksize)
	if err != nil {
		return rawBuf{}, 0, err
	}
	defer d.freeTemp(keys)
	name := "kmap_cand_coarse_" + suffix
	if fine {
		name = "kmap_cand_fine_" + suffix
	}
	g, b := d.elementwise(n)
	if err := d.launch(name, g, b, 0, c.ptr, int64(c.n), extOf(out), convOf(conv), sent, keys.ptr); err != nil {
		return rawBuf{}, 0, err
	}
	if err := d.radixSort(keys.ptr, 0, n, wide, bitLen(sites), false); err != nil {
		return rawBuf{}, 0, err
	}
	uk, m, err := d.unique(keys.ptr, n, wide, sites)
	if err != nil {
		return rawBuf{}, 0, err
	}
	defer d.freeTemp(uk)
	if m == 0 {
		return rawBuf{ptr: d.zeroPage}, 0, nil
	}
	oc, err := d.allocTemp(m * 16)
	if err != nil {
		return rawBuf{}, 0, err
	}
	g, b = d.elementwise(m)
	if err := d.launch("kmap_decode_"+suffix, g, b, 0, uk.ptr, m, extOf(out), oc.ptr); err != nil {
		d.freeTemp(oc)
		return rawBuf{}, 0, err
	}
	return oc, int(m), nil
}

// strided builds the device tables of a strided map over c; outs are the
// given output coordinates or nil to generate them.
func (d *Device) strided(op string, c deviceCoords, ext grid.Extent, conv grid.Conv, outs *deviceCoords) (*devMap, error) {
	out, err := conv.StridedExtent(ext)
	if err != nil {
		return nil, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	V := conv.Volume()
	t, err := d.hashCoords(c.ptr, int64(c.n), ext, 0, false, op+": ")
	if err != nil {
		return nil, err
	}
	defer d.freeTable(t)
	dm := &devMap{nIn: c.n, V: V}
	outPtr := devPtr(0)
	if outs == nil {
		if dm.out, dm.nOut, err = d.reached(op, c, out, conv, false); err != nil {
			return nil, err
		}
		outPtr = dm.out.ptr
	} else {
		ot, err := d.hashCoords(outs.ptr, int64(outs.n), out, 0, false, op+": output coordinates: ")
		if err != nil {
			return nil, err
		}
		d.freeTable(ot)
		dm.nOut, outPtr = outs.n, outs.ptr
	}
	if err := checkTable(op, dm.nOut, V); err != nil {
		d.freeDevMap(dm)
		return nil, err
	}
	if err := d.buildNbr(dm, outPtr, ext, conv, t, false); err != nil {
		d.freeDevMap(dm)
		return nil, err
	}
	if err := d.buildRev(dm, false); err != nil {
		d.freeDevMap(dm)
		return nil, err
	}
	return dm, nil
}

// transposed builds the device tables of a transposed map over c.
func (d *Device) transposed(op string, c deviceCoords, ext grid.Extent, conv grid.Conv) (*devMap, error) {
	out, err := conv.TransposedExtent(ext)
	if err != nil {
		return nil, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	V := conv.Volume()
	t, err := d.hashCoords(c.ptr, int64(c.n), ext, 0, false, op+": ")
	if err != nil {
		return nil, err
	}
	defer d.freeTable(t)
	dm := &devMap{nIn: c.n, V: V}
	if dm.out, dm.nOut, err = d.reached(op, c, out, conv, true); err != nil {
		return nil, err
	}
	if err := checkTable(op, dm.nOut, V); err != nil {
		d.freeDevMap(dm)
		return nil, err
	}
	if err := d.buildNbr(dm, dm.out.ptr, ext, conv, t, true); err != nil {
		d.freeDevMap(dm)
		return nil, err
	}
	if err := d.buildRev(dm, false); err != nil {
		d.freeDevMap(dm)
		return nil, err
	}
	return dm, nil
}

// hostCoords returns the host copy of the coordinates m (the caller's slice
// for host data).
func hostCoords(d *Device, m sparse.Matrix, c deviceCoords) ([]int32, error) {
	if h, ok := m.Data.([]int32); ok {
		return h, nil
	}
	return download[int32](d, c.ptr, 4*c.n)
}

// finish downloads the host tables of dm into m and registers the device
// tables in the map cache (ownership of nbr and rev moves to the cache).
func (e *Engine) finish(m *kmap.Map, dm *devMap) error {
	d := e.d
	var err error
	if m.Nbr, err = download[int32](d, dm.nbr.ptr, dm.nOut*dm.V); err != nil {
		return err
	}
	if dm.out.ptr != 0 {
		if m.OutCoords, err = download[int32](d, dm.out.ptr, 4*dm.nOut); err != nil {
			return err
		}
		d.freeTemp(dm.out)
		dm.out = rawBuf{}
	}
	me := e.entry(m)
	me.nbr, me.haveNbr = dm.nbr, true
	me.rev, me.haveRev = dm.rev, true
	dm.nbr, dm.rev = rawBuf{}, rawBuf{}
	return nil
}

// SubmanifoldMap builds on the GPU the map of a submanifold convolution
// over coords ([N, 4] Int32 on this engine's device, or host []int32), as
// kmap.NewSubmanifold does: the outputs are the inputs and
// Nbr[o, v] is the row at coords[o] + (k(v) − ⌊K/2⌋)·dilation, or −1.
// The device Nbr and Rev tables are kept in the engine's map cache; the
// returned map's host slices are downloaded (see the package notes in
// kmapgpu.go). Kernel sizes must be odd.
func (e *Engine) SubmanifoldMap(coords sparse.Matrix, ext grid.Extent, kernel, dilation [3]int) (*kmap.Map, error) {
	const op = "SubmanifoldMap"
	conv := grid.Submanifold(kernel, dilation)
	if err := conv.ValidateSubmanifold(); err != nil {
		return nil, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if err := checkExtent(op, "", ext); err != nil {
		return nil, err
	}
	var m *kmap.Map
	err := e.d.do(func() error {
		c, err := e.coordsOn(op, coords)
		if err != nil {
			return err
		}
		defer c.release(e.d)
		dm, err := e.d.submanifold(op, c, ext, conv)
		if err != nil {
			return err
		}
		defer e.d.freeDevMap(dm)
		hc, err := hostCoords(e.d, coords, c)
		if err != nil {
			return err
		}
		m = &kmap.Map{Kind: kmap.Submanifold, Conv: conv, In: ext, Out: ext, NIn: c.n, NOut: c.n, InCoords: hc, OutCoords: hc}
		return e.finish(m, dm)
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// StridedMap builds on the GPU the map of a strided sparse convolution
// (torch.nn.Conv3d on the active sites) over coords, as kmap.NewStrided
// does. With outCoords the zero Matrix the outputs are every site of
// conv.StridedExtent(ext) some input reaches, sorted by (batch, x, y, z);
// otherwise they are outCoords ([M, 4] Int32, device or host; unique and
// inside the output grid). Device tables are cached as for SubmanifoldMap.
func (e *Engine) StridedMap(coords sparse.Matrix, ext grid.Extent, conv grid.Conv, outCoords sparse.Matrix) (*kmap.Map, error) {
	const op = "StridedMap"
	if err := conv.Validate(); err != nil {
		return nil, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if err := checkExtent(op, "", ext); err != nil {
		return nil, err
	}
	out, err := conv.StridedExtent(ext)
	if err != nil {
		return nil, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if err := checkExtent(op, "output grid: ", out); err != nil {
		return nil, err
	}
	var m *kmap.Map
	err = e.d.do(func() error {
		c, err := e.coordsOn(op, coords)
		if err != nil {
			return err
		}
		defer c.release(e.d)
		var outs *deviceCoords
		if !outCoords.IsZero() {
			oc, err := e.coordsOn(op+" output coordinates", outCoords)
			if err != nil {
				return err
			}
			defer oc.release(e.d)
			outs = &oc
		}
		dm, err := e.d.strided(op, c, ext, conv, outs)
		if err != nil {
			return err
		}
		defer e.d.freeDevMap(dm)
		hc, err := hostCoords(e.d, coords, c)
		if err != nil {
			return err
		}
		m = &kmap.Map{Kind: kmap.Strided, Conv: conv, In: ext, Out: out, NIn: c.n, NOut: dm.nOut, InCoords: hc}
		if outs != nil {
			if m.OutCoords, err = hostCoords(e.d, outCoords, *outs); err != nil {
				return err
			}
		}
		return e.finish(m, dm)
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// TransposedMap builds on the GPU the map of a sparse transposed
// convolution (torch.nn.ConvTranspose3d on the active sites, no output
// padding) over coords, as kmap.NewTransposed does: the outputs are every
// site in·stride − padding + k·dilation of conv.TransposedExtent(ext),
// sorted by (batch, x, y, z). Device tables are cached as for
// SubmanifoldMap.
func (e *Engine) TransposedMap(coords sparse.Matrix, ext grid.Extent, conv grid.Conv) (*kmap.Map, error) {
	const op = "TransposedMap"
	if err := conv.Validate(); err != nil {
		return nil, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if err := checkExtent(op, "", ext); err != nil {
		return nil, err
	}
	out, err := conv.TransposedExtent(ext)
	if err != nil {
		return nil, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if err := checkExtent(op, "output grid: ", out); err != nil {
		return nil, err
	}
	var m *kmap.Map
	err = e.d.do(func() error {
		c, err := e.coordsOn(op, coords)
		if err != nil {
			return err
		}
		defer c.release(e.d)
		dm, err := e.d.transposed(op, c, ext, conv)
		if err != nil {
			return err
		}
		defer e.d.freeDevMap(dm)
		hc, err := hostCoords(e.d, coords, c)
		if err != nil {
			return err
		}
		m = &kmap.Map{Kind: kmap.Transposed, Conv: conv, In: ext, Out: out, NIn: c.n, NOut: dm.nOut, InCoords: hc}
		return e.finish(m, dm)
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// InverseMap returns the map from the outputs of the strided map s back to
// exactly its inputs, as kmap.NewInverse does: Nbr is s's reverse table
// and Rev is s.Nbr. The tables are copied on the device from s's device
// tables (built by this engine or uploaded once), so no search runs and
// nothing is computed on the host; the host Nbr is downloaded.
func (e *Engine) InverseMap(s *kmap.Map) (*kmap.Map, error) {
	const op = "InverseMap"
	if s == nil {
		return nil, fmt.Errorf("%w: cudaext: %s of a nil map", kmap.ErrMap, op)
	}
	if s.Kind != kmap.Strided {
		return nil, fmt.Errorf("%w: cudaext: %s needs a strided map, got a %v map", kmap.ErrMap, op, s.Kind)
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	m := &kmap.Map{Kind: kmap.Inverse, Conv: s.Conv, In: s.Out, Out: s.In, NIn: s.NOut, NOut: s.NIn,
		InCoords: s.OutCoords, OutCoords: s.InCoords}
	err := e.d.do(func() error {
		d := e.d
		V := s.V()
		sn, err := e.nbrTable(s)
		if err != nil {
			return err
		}
		sr, err := e.deriveRev(s)
		if err != nil {
			return err
		}
		dm := &devMap{nIn: m.NIn, nOut: m.NOut, V: V}
		defer d.freeDevMap(dm)
		if dm.nbr, err = d.allocTable(m.NOut, V); err != nil {
			return err
		}
		if dm.rev, err = d.allocTable(m.NIn, V); err != nil {
			return err
		}
		if err := memcpyDtoD(dm.nbr.ptr, sr, int64(m.NOut)*int64(V)*4, d.stream); err != nil {
			return err
		}
		if err := memcpyDtoD(dm.rev.ptr, sn, int64(m.NIn)*int64(V)*4, d.stream); err != nil {
			return err
		}
		return e.finish(m, dm)
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Tables selects the device tables derived from a kernel map.
type Tables uint8

// The derived tables.
const (
	// TablePairs is the per-tap pair lists (kmap.Pairs) of the weight
	// gradient.
	TablePairs Tables = 1 << iota
	// TableMasked is the Gray-code order and the tile tap unions of Nbr
	// (kmap.Masked, Tiles) of the masked forward algorithms, for the tile
	// height of every GEMM tile configuration.
	TableMasked
	// TableReverseMasked is TableMasked for the reverse table (masked input
	// gradient).
	TableReverseMasked
	// TablesAll selects every derived table.
	TablesAll = TablePairs | TableMasked | TableReverseMasked
)

// DeriveTables computes the selected derived tables of m on the device
// from its device Nbr (uploaded once if m was built on the host) and keeps
// them in the engine's map cache, so the convolutions that need them find
// them there. The reverse table is always derived. Tables already cached
// are kept.
func (e *Engine) DeriveTables(m *kmap.Map, which Tables) error {
	if err := checkMap("cudaext: DeriveTables", m); err != nil {
		return err
	}
	return e.d.do(func() error {
		if _, err := e.deriveRev(m); err != nil {
			return err
		}
		if which&TablePairs != 0 {
			if _, _, _, err := e.derivePairs(m); err != nil {
				return err
			}
		}
		for _, rows := range tileHeights() {
			if which&TableMasked != 0 {
				if _, err := e.deriveMasked(m, false, rows); err != nil {
					return err
				}
			}
			if which&TableReverseMasked != 0 {
				if _, err := e.deriveMasked(m, true, rows); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// tileHeights returns the distinct tile heights (BM) of the GEMM tiles.
func tileHeights() []int {
	var hs []int
	for _, t := range kernels.Tiles {
		if !slices.Contains(hs, t.BM) {
			hs = append(hs, t.BM)
		}
	}
	slices.Sort(hs)
	return hs
}

// deriveRev returns the device reverse table of m, computing it on the
// device from the device Nbr if it is not cached. Worker only.
func (e *Engine) deriveRev(m *kmap.Map) (devPtr, error) {
	me := e.entry(m)
	if me.haveRev {
		return me.rev.ptr, nil
	}
	nbr, err := e.nbrTable(m)
	if err != nil {
		return 0, err
	}
	V := m.V()
	rev, err := e.d.allocTable(m.NIn, V)
	if err != nil {
		return 0, err
	}
	if err := e.d.reverse(nbr, rev.ptr, m.NIn, m.NOut, V, m.Kind == kmap.Submanifold); err != nil {
		e.d.freeTemp(rev)
		return 0, err
	}
	me.rev, me.haveRev = rev, true
	return rev.ptr, nil
}

// pairsChunk is the number of output rows per block of the pair kernels
// (kernels/kmap.cu kChunk).
const pairsChunk = 256

// derivePairs returns the device pair lists of m (kmap.Pairs: in, out
// [P] int32, seg [V+1] int64), computing them on the device if they are
// not cached. Worker only.
func (e *Engine) derivePairs(m *kmap.Map) (in, out, seg devPtr, err error) {
	me := e.entry(m)
	if me.havePairs {
		return me.pairIn.ptr, me.pairOut.ptr, me.pairSg.ptr, nil
	}
	nbr, err := e.nbrTable(m)
	if err != nil {
		return 0, 0, 0, err
	}
	pin, pout, psg, err := e.d.pairs(nbr, m.NOut, m.V())
	if err != nil {
		return 0, 0, 0, err
	}
	me.pairIn, me.pairOut, me.pairSg, me.havePairs = pin, pout, psg, true
	return pin.ptr, pout.ptr, psg.ptr, nil
}

// pairs builds the pair lists of the table nbr [nOut, V].
func (d *Device) pairs(nbr devPtr, nOut, V int) (pin, pout, psg rawBuf, err error) {
	fail := func(e error) (rawBuf, rawBuf, rawBuf, error) {
		for _, r := range []rawBuf{pin, pout, psg} {
			if r.ptr != 0 {
				d.freeTemp(r)
			}
		}
		return rawBuf{}, rawBuf{}, rawBuf{}, e
	}
	if psg, err = d.allocTemp(int64(V+1) * 8); err != nil {
		return fail(err)
	}
	nc := int64((nOut + pairsChunk - 1) / pairsChunk)
	if nc == 0 {
		if err := memsetD8(psg.ptr, 0, int64(V+1)*8, d.stream); err != nil {
			return fail(err)
		}
		return rawBuf{ptr: d.zeroPage}, rawBuf{ptr: d.zeroPage}, psg, nil
	}
	cnt, err := d.allocTemp(int64(V) * nc * 4)
	if err != nil {
		return fail(err)
	}
	defer d.freeTemp(cnt)
	off, err := d.allocTemp(int64(V) * nc * 8)
	if err != nil {
		return fail(err)
	}
	defer d.freeTemp(off)
	blk := dim3{X: pairsChunk}
	if err := d.launch("kmap_pairs_count", dim3{X: int(nc)}, blk, 0, nbr, int64(nOut), int32(V), cnt.ptr, nc); err != nil {
		return fail(err)
	}
	if err := d.scan(scanI32I64, cnt.ptr, off.ptr, int64(V)*nc, psg.ptr+devPtr(8*V)); err != nil {
		return fail(err)
	}
	g, b := d.elementwise(int64(V))
	if err := d.launch("kmap_pairs_seg", g, b, 0, off.ptr, nc, int32(V), psg.ptr); err != nil {
		return fail(err)
	}
	tot, err := download[int64](d, psg.ptr+devPtr(8*V), 1)
	if err != nil {
		return fail(err)
	}
	if tot[0] == 0 {
		return rawBuf{ptr: d.zeroPage}, rawBuf{ptr: d.zeroPage}, psg, nil
	}
	if pin, err = d.allocTemp(tot[0] * 4); err != nil {
		return fail(err)
	}
	if pout, err = d.allocTemp(tot[0] * 4); err != nil {
		return fail(err)
	}
	if err := d.launch("kmap_pairs_write", dim3{X: int(nc)}, blk, 0, nbr, int64(nOut), int32(V), off.ptr, nc, pin.ptr, pout.ptr); err != nil {
		return fail(err)
	}
	return pin, pout, psg, nil
}

// deriveMasked returns the device Gray order and tile tap unions of m's
// forward (reverse = false) or reverse table for tiles of rows rows,
// computing them on the device if they are not cached; an order cached
// for another tile height is reused. Worker only.
func (e *Engine) deriveMasked(m *kmap.Map, reverse bool, rows int) (*maskedTables, error) {
	me := e.entry(m)
	k := maskKey{reverse, rows}
	if t, ok := me.masked[k]; ok {
		return t, nil
	}
	var table devPtr
	var err error
	n := m.NOut
	if reverse {
		table, err = e.deriveRev(m)
		n = m.NIn
	} else {
		table, err = e.nbrTable(m)
	}
	if err != nil {
		return nil, err
	}
	var order devPtr
	for key, t := range me.masked {
		if key.reverse == reverse {
			order = t.order.ptr
			break
		}
	}
	t, err := e.d.masked(table, n, m.V(), rows, order)
	if err != nil {
		return nil, err
	}
	me.masked[k] = t
	return t, nil
}

// masked computes the Gray order of the rows of table [n, V] (or copies
// order when it is not 0) and the tap unions of tiles of `rows` rows.
func (d *Device) masked(table devPtr, n, V, rows int, order devPtr) (*maskedTables, error) {
	rows = max(rows, 1)
	W := (V + 63) / 64
	t := &maskedTables{}
	fail := func(err error) (*maskedTables, error) {
		for _, r := range []rawBuf{t.order, t.seg, t.taps} {
			if r.ptr != 0 {
				d.freeTemp(r)
			}
		}
		return nil, err
	}
	nt := int64((n + rows - 1) / rows)
	var err error
	if t.seg, err = d.allocTemp((nt + 1) * 4); err != nil {
		return fail(err)
	}
	if n == 0 {
		t.order, t.taps = rawBuf{ptr: d.zeroPage}, rawBuf{ptr: d.zeroPage}
		if err := d.fillI32(t.seg.ptr, 0, 1); err != nil {
			return fail(err)
		}
		return t, nil
	}
	if t.order, err = d.allocTemp(int64(n) * 4); err != nil {
		return fail(err)
	}
	mask, err := d.allocTemp(int64(n) * int64(W) * 8)
	if err != nil {
		return fail(err)
	}
	defer d.freeTemp(mask)
	if err := d.grayOrder(table, n, V, mask.ptr, t.order.ptr, order); err != nil {
		return fail(err)
	}
	unions, err := d.allocTemp(nt * int64(W) * 8)
	if err != nil {
		return fail(err)
	}
	defer d.freeTemp(unions)
	cnt, err := d.allocTemp(nt * 4)
	if err != nil {
		return fail(err)
	}
	defer d.freeTemp(cnt)
	if err := d.fillI32(cnt.ptr, 0, nt); err != nil {
		return fail(err)
	}
	g, b := d.elementwise(nt * int64(W))
	if err := d.launch("masks_union", g, b, 0, mask.ptr, t.order.ptr, int64(n), int32(W), int32(rows), nt, unions.ptr, cnt.ptr); err != nil {
		return fail(err)
	}
	total := t.seg.ptr + devPtr(4*nt)
	if err := d.scan(scanI32, cnt.ptr, t.seg.ptr, nt, total); err != nil {
		return fail(err)
	}
	ntaps, err := download[int32](d, total, 1)
	if err != nil {
		return fail(err)
	}
	if ntaps[0] == 0 {
		t.taps = rawBuf{ptr: d.zeroPage}
		return t, nil
	}
	if t.taps, err = d.allocTemp(int64(ntaps[0]) * 4); err != nil {
		return fail(err)
	}
	g, b = d.elementwise(nt)
	if err := d.launch("masks_taps", g, b, 0, unions.ptr, nt, int32(W), t.seg.ptr, t.taps.ptr); err != nil {
		return fail(err)
	}
	return t, nil
}

// grayOrder writes the masks [n, W] of table [n, V] to mask and the rows
// sorted stably by the Gray rank of their masks to order (copied from
// known when it is not 0).
func (d *Device) grayOrder(table devPtr, n, V int, mask, order, known devPtr) error {
	W := (V + 63) / 64
	N := int64(n)
	g, b := d.elementwise(N)
	if known != 0 {
		if err := d.launch("masks_build", g, b, 0, table, N, int32(V), int32(W), mask, devPtr(0), devPtr(0)); err != nil {
			return err
		}
		return memcpyDtoD(order, known, N*4, d.stream)
	}
	if W == 1 && V <= 32 {
		rank, err := d.allocTemp(N * 4)
		if err != nil {
			return err
		}
		defer d.freeTemp(rank)
		if err := d.launch("masks_build", g, b, 0, table, N, int32(V), int32(W), mask, devPtr(0), rank.ptr); err != nil {
			return err
		}
		return d.radixSort(rank.ptr, order, N, false, V, true)
	}
	rank, err := d.allocTemp(N * int64(W) * 8)
	if err != nil {
		return err
	}
	defer d.freeTemp(rank)
	if err := d.launch("masks_build", g, b, 0, table, N, int32(V), int32(W), mask, rank.ptr, devPtr(0)); err != nil {
		return err
	}
	if W == 1 {
		return d.radixSort(rank.ptr, order, N, true, V, true)
	}
	keys, err := d.allocTemp(N * 8)
	if err != nil {
		return err
	}
	defer d.freeTemp(keys)
	if err := d.launch("sort_iota_i32", g, b, 0, order, N); err != nil {
		return err
	}
	for w := range W {
		if err := d.launch("masks_word", g, b, 0, rank.ptr, order, N, int32(W), int32(w), keys.ptr); err != nil {
			return err
		}
		if err := d.radixSort(keys.ptr, order, N, true, min(64, V-64*w), false); err != nil {
			return err
		}
	}
	return nil
}
