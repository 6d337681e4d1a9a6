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
// A submanifold map's Nbr comes from half the taps (kmap_nbr_sub: tap
// V−1−v mirrors tap v) or, for 3×3×3 kernels of dilation 1 from
// brickMinRows rows on, from the brick search (buildSubNbrBricks;
// FLEXGEMM_NO_BRICKS=1 turns it off), which checks the rows itself and
// builds no coordinate table unless one is bad.
// Both tables and the input and output coordinates are registered in the
// engine's map cache under the returned *kmap.Map, so convolutions and
// pooling on this engine never upload them.
//
// Nothing is downloaded: the returned Map has its header (Kind, Conv,
// extents, row counts), the caller's host coordinate slices where the
// coordinates were given on the host, and nil for every other host table.
// Its Source is the engine, which downloads the missing tables once when
// host code first asks (kmap.Map.Load, called by the CPU engine, by
// kmap's derived accessors and by sparse's host paths). Code that reads
// m.Nbr, m.InCoords or m.OutCoords directly must call m.Load first; to
// chain builds on the device use OutCoords. The device tables live until
// the map is garbage collected, ForgetMap (which loads the host tables
// first) or ReleaseMap (which makes an unloaded map unusable).
//
// Derived device tables (pair lists, masks with Gray order and tile tap
// unions, for the forward and the reverse table) are computed on the
// device from the device Nbr by DeriveTables, or on first use by the map
// cache (maps.go).
//
// Every table equals the CPU builders' (package kmap) entry for entry; the
// errors name the same rows.

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/hash"
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
	// From the brick search: Nbr's tap masks [nOut] uint64 and the Gray
	// ranks of the masks read in table order [nOut] uint32, for the Gray
	// order of tables of more than kmap.BalancedKeyMaxRows rows
	// (grayTablesFor).
	mask, rank rawBuf
	// From the hash path of small submanifold maps: the Gray order of Nbr,
	// derived before the host waits for the inserts' status (submanifold).
	gray *grayTables
}

func (d *Device) freeDevMap(dm *devMap) {
	bufs := []rawBuf{dm.out, dm.nbr, dm.rev, dm.mask, dm.rank}
	if dm.gray != nil {
		bufs = append(bufs, dm.gray.mask, dm.gray.order)
	}
	for _, r := range bufs {
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

// resampledExtent checks what StridedMap and TransposedMap check before
// they build: the convolution, the input grid, and the output grid that
// extentOf (grid.Conv.StridedExtent or TransposedExtent) derives, which it
// returns; errors name op.
func resampledExtent(op string, ext grid.Extent, conv grid.Conv, extentOf func(grid.Conv, grid.Extent) (grid.Extent, error)) (grid.Extent, error) {
	if err := conv.Validate(); err != nil {
		return grid.Extent{}, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if err := checkExtent(op, "", ext); err != nil {
		return grid.Extent{}, err
	}
	out, err := extentOf(conv, ext)
	if err != nil {
		return grid.Extent{}, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if err := checkExtent(op, "output grid: ", out); err != nil {
		return grid.Extent{}, err
	}
	return out, nil
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
	empty := func() *devMap { return &devMap{nIn: c.n, nOut: c.n, V: V} }
	dm := empty()
	if d.brickSearch(c.n, ext, conv) {
		// The brick search checks the rows itself; the coordinate table is
		// built only to name the offending rows.
		err := d.buildSubNbrBricks(dm, c.ptr, ext)
		if errors.Is(err, errBrickRows) {
			d.freeDevMap(dm)
			t, err := d.hashCoordsPer(c.ptr, int64(c.n), ext, 0, 2, false, op+": ")
			if err == nil {
				d.freeTable(t)
				err = fmt.Errorf("cudaext: %s: the brick search rejected rows the coordinate table accepts", op)
			}
			return nil, err
		}
		if err != nil {
			d.freeDevMap(dm)
			return nil, err
		}
		return dm, nil
	}
	// The coordinate table checks the rows (range, duplicates) and answers
	// the neighbour lookups, queued behind its inserts before their status
	// is read, and so is the Gray order of the masked algorithms (3×3×3
	// and smaller kernels), which grayTablesFor would otherwise derive at
	// the first convolution: the device works through both while the host
	// waits (docs/PERF_NOTES.md, step 30). Where the status reports
	// anything, the map is built again after hashCoordsPer's checks (which
	// name the rows).
	t, ok, err := d.hashCoordsThen(c.ptr, int64(c.n), ext, mapSlotsPerKey, func(t *devTable) error {
		if err := d.buildSubNbr(dm, c.ptr, ext, conv, t); err != nil {
			return err
		}
		if dm.nOut == 0 || dm.V > 32 {
			return nil
		}
		var err error
		dm.gray, err = d.grayMasks(dm.nbr.ptr, dm.nOut, dm.V)
		return err
	})
	if ok {
		d.freeTable(t)
		return dm, nil
	}
	d.freeDevMap(dm)
	if err != nil {
		return nil, err
	}
	dm = empty()
	t, err = d.hashCoordsPer(c.ptr, int64(c.n), ext, 0, mapSlotsPerKey, false, op+": ")
	if err != nil {
		return nil, err
	}
	defer d.freeTable(t)
	if err := d.buildSubNbr(dm, c.ptr, ext, conv, t); err != nil {
		d.freeDevMap(dm)
		return nil, err
	}
	// The reverse table is Nbr with its taps mirrored; it is derived on
	// first use (revTable), so inference never builds it.
	return dm, nil
}

// buildSubNbr fills dm.nbr of a submanifold map over coords (odd kernel
// sizes, as ValidateSubmanifold requires) with kmap_nbr_sub: the table is
// filled with −1, then half the taps are probed and each hit is also
// written to its mirror entry.
func (d *Device) buildSubNbr(dm *devMap, coords devPtr, ext grid.Extent, conv grid.Conv, t *devTable) error {
	var err error
	if dm.nbr, err = d.allocTable(dm.nOut, dm.V); err != nil {
		return err
	}
	total := int64(dm.nOut) * int64(dm.V)
	if total == 0 {
		return nil
	}
	if err := d.fillI32(dm.nbr.ptr, -1, total); err != nil {
		return err
	}
	g, b := d.elementwise(int64(dm.nOut) * int64(max((dm.V-1)/2, 1)))
	return d.launch("kmap_nbr_sub", g, b, 0, coords, int64(dm.nOut), extOf(ext), convOf(conv), t.arg(), dm.nbr.ptr)
}

// EnvNoBricks names the environment variable that, set to 1 when the
// engine opens, keeps submanifold maps on the per-tap hash search
// (kmap_nbr_sub) instead of the brick search.
const EnvNoBricks = "FLEXGEMM_NO_BRICKS"

// brickSearch reports whether buildSubNbrBricks builds the Nbr table of a
// submanifold map of n rows and geometry conv over ext: 3×3×3 kernels of
// dilation 1 whose brick keys fit the narrow table layout, from
// d.brickMinRows rows on (brickMinRows, or EnvBrickMinRows; tests lower
// it), unless EnvNoBricks is set.
func (d *Device) brickSearch(n int, ext grid.Extent, conv grid.Conv) bool {
	return !d.noBricks && n >= d.brickMinRows && conv.Kernel == [3]int{3, 3, 3} &&
		conv.Dilation == [3]int{1, 1, 1} && brickExtent(ext).KeyBits() <= 32
}

// brickExtent is the extent of the 4×4×4 bricks of ext.
func brickExtent(ext grid.Extent) grid.Extent {
	return grid.Extent{Batch: ext.Batch, X: (ext.X + 3) / 4, Y: (ext.Y + 3) / 4, Z: (ext.Z + 3) / 4}
}

// errBrickRows reports that the brick search found a row outside the
// extent or a duplicate coordinate (submanifold names them).
var errBrickRows = errors.New("cudaext: rows outside the extent or duplicated")

// buildSubNbrBricks fills dm.nbr of a 3×3×3 submanifold map of dilation 1
// over coords (errBrickRows when a row is outside ext or duplicated) by the
// brick search: the rows' 4×4×4 bricks go into a hash table (one key per
// brick, not per row: a 4.1 M-voxel shell has ≈ 0.3 M bricks, so the
// occupied slots stay in L2) with a 64-bit mask of their occupied cells,
// numbered densely as they are stored, and a pool of 64 cells per brick
// holds the rows (unfilled: only cells in the masks are read); then a warp
// per brick looks up the 27 bricks around it (a lane each: ≈ 2 lookups
// per row of a shell, against 13 per-tap lookups of kmap_nbr_sub in a
// table of one key per row), gathers the cells around the brick into
// shared memory and writes its rows' 27 entries. Every entry is written
// once: no −1 fill, no mirror writes. Waits for the device once, for the
// inserts' status: after the search is queued over a pool sized by the
// recent builds' bricks per row (d.bricks), which the insert itself fills
// (or a scatter pass after it, EnvNoBrickFusedScatter), so the device
// searches while the host reads the status; or, with no build recorded
// (or EnvNoBrickGuess), before a scatter pass and the search, to size the
// pool by the count. A count above the guess repeats the scatter and the
// search over a pool of the count (the first search stops at the guess
// and reads larger brick numbers as absent).
func (d *Device) buildSubNbrBricks(dm *devMap, coords devPtr, ext grid.Extent) error {
	var err error
	if dm.nbr, err = d.allocTable(dm.nOut, dm.V); err != nil {
		return err
	}
	n := int64(dm.nOut)
	if n == 0 {
		return nil
	}
	bext := brickExtent(ext)
	bt, err := d.newDevTable(tableLog(min(n, int64(min(bext.Sites(), uint64(math.MaxInt64/2))))), bext, maxProbeLimit, false)
	if err != nil {
		return err
	}
	defer d.freeTable(bt)
	bt.probe = bt.limit // until the inserts report their longest probe
	cells, err := d.allocTemp(bt.slots() * 8)
	if err != nil {
		return err
	}
	defer d.freeTemp(cells)
	if err := memsetD8(cells.ptr, 0, bt.slots()*8, d.stream); err != nil {
		return err
	}
	first, err := d.allocTemp(n * 4) // a row of each brick, by brick number
	if err != nil {
		return err
	}
	defer d.freeTemp(first)
	// The rows' tap masks and Gray ranks come with the table, for its Gray
	// order: no masks_build pass over the 27 entries of every row. Tables
	// of at most kmap.BalancedKeyMaxRows rows (tests lower the brick
	// threshold) key their order by kmap.KeyTaps instead, which needs the
	// tap counts first: grayTablesFor builds it from the table, and the
	// kernel writes no masks or ranks (null pointers).
	if n > kmap.BalancedKeyMaxRows {
		if dm.mask, err = d.allocTemp(n * 8); err != nil {
			return err
		}
		if dm.rank, err = d.allocTemp(n * 4); err != nil {
			return err
		}
	}
	sb, err := d.newStatusBuf()
	if err != nil {
		return err
	}
	defer d.freeTemp(sb.raw) // stream-ordered: reused only behind the search
	var pool rawBuf
	freePool := func() {
		if pool.ptr != 0 {
			d.freeTemp(pool)
			pool = rawBuf{}
		}
	}
	defer freePool()
	// newPool allocates a pool of nb bricks. No −1 fill: kmap_nbr_brick
	// reads only the cells that the bricks' cell masks mark.
	newPool := func(nb int64) error {
		freePool()
		var err error
		if pool, err = d.allocTemp(max(nb, 1) * 64 * 4); err != nil {
			pool = rawBuf{}
		}
		return err
	}
	guess := int64(0)
	if !d.noBrickGuess {
		guess = d.bricks.guess(n)
	}
	// With a guess the insert fills the pool itself (one round per block:
	// kmap_brick_insert's wait for other blocks' brick numbers needs it),
	// unless EnvNoBrickFusedScatter.
	fused := guess > 0 && !d.noBrickFusedScatter
	g, b := d.elementwise(n)
	ig, poolCap := g, int64(0)
	if fused {
		if err := newPool(guess); err != nil {
			return err
		}
		ig, poolCap = dim3{X: int(ceilDiv(n, int64(b.X)))}, guess
	}
	if err := d.launch("kmap_brick_insert", ig, b, 0, coords, n, extOf(ext), extOf(bext), bt.arg(), cells.ptr, first.ptr, sb.ptr(),
		pool.ptr, poolCap); err != nil {
		return err
	}
	// search searches the first nb bricks of the pool, or, with count (the
	// status's brick count), the first min(nb, *count); scatter first
	// fills a new pool of nb bricks.
	search := func(nb int64, count devPtr, scatter bool) error {
		if scatter {
			if err := newPool(nb); err != nil {
				return err
			}
			if err := d.launch("kmap_brick_scatter", g, b, 0, coords, n, extOf(bext), bt.arg(), pool.ptr, nb); err != nil {
				return err
			}
		}
		blocks := min(ceilDiv(max(nb, 1), brickWarps), int64(d.info.SMs)*brickBlocksPerSM)
		kernel := "kmap_nbr_brick"
		if d.noBrickBallotMask {
			kernel = "kmap_nbr_brick_loop"
		}
		return d.launch(kernel, dim3{X: int(blocks)}, dim3{X: 32 * brickWarps}, 0, coords, nb, count, extOf(bext), bt.arg(),
			cells.ptr, first.ptr, pool.ptr, dm.nbr.ptr, dm.mask.ptr, dm.rank.ptr)
	}
	var st deviceStatus
	if guess > 0 {
		if err := d.queueStatusCopy(sb); err != nil {
			return err
		}
		if err := search(guess, sb.ptr()+stCount*4, !fused); err != nil {
			return err
		}
		st, err = d.queuedStatus()
	} else {
		st, err = sb.read(d)
	}
	if err != nil {
		return err
	}
	if st[stFlags]&(flagRange|flagDup) != 0 {
		return errBrickRows
	}
	if st[stFlags]&flagFull != 0 {
		return fmt.Errorf("%w: cudaext: brick table of %d slots holds no free slot within %d probes", hash.ErrFull, bt.slots(), bt.limit)
	}
	bt.probe = int(st[stMaxProbe]) + 1
	nb := int64(st[stCount])
	d.bricks.note(n, nb)
	if guess > 0 && nb <= guess {
		return nil
	}
	if guess > 0 {
		d.brickResearches++
	}
	return search(nb, 0, true)
}

// brickWarps is the number of warps (a brick each at a time) per block of
// kmap_nbr_brick (kernels/kmap.cu kBrickWarps); brickBlocksPerSM its
// blocks per SM (kBrickBlocksPerSM: the grid is one full wave, and the
// kernel loops over the bricks).
const (
	brickWarps       = 8
	brickBlocksPerSM = 5
)

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
	t, err := d.hashCoordsPer(c.ptr, int64(c.n), ext, 0, mapSlotsPerKey, false, op+": ")
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
	t, err := d.hashCoordsPer(c.ptr, int64(c.n), ext, 0, mapSlotsPerKey, false, op+": ")
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

// hostSlice returns the caller's host slice of coordinates m, or nil for
// device coordinates (left to the map's Source).
func hostSlice(m sparse.Matrix) []int32 {
	h, _ := m.Data.([]int32)
	return h
}

// coordBlock is a coordinate array of the map cache: a block the cache
// owns, or the caller's buffer, borrowed (lent) rather than copied.
type coordBlock struct {
	rawBuf
	lent *Buffer
}

// release ends the cache's use of c. Worker only.
func (c coordBlock) release(d *Device) {
	if c.lent != nil {
		c.lent.drop()
		return
	}
	d.freeTemp(c.rawBuf)
}

// keepCoords returns the coordinates c as a block for the map cache,
// copying them only when it must: an upload made for this call is taken
// over (c releases nothing then), and a caller's buffer is borrowed (see
// Buffer). Worker only.
func (d *Device) keepCoords(c *deviceCoords) (coordBlock, error) {
	switch {
	case c.n == 0:
		return coordBlock{rawBuf: rawBuf{ptr: d.zeroPage}}, nil
	case c.tmp.ptr != 0:
		blk := coordBlock{rawBuf: c.tmp}
		c.tmp = rawBuf{}
		return blk, nil
	case c.buf != nil && c.buf.borrow():
		return coordBlock{rawBuf: rawBuf{ptr: c.ptr}, lent: c.buf}, nil
	}
	r, err := d.copyCoords(*c)
	return coordBlock{rawBuf: r}, err
}

// copyCoords returns a copy of the coordinates c in a new block (the zero
// page when empty), owned by the map cache.
func (d *Device) copyCoords(c deviceCoords) (rawBuf, error) {
	if c.n == 0 {
		return rawBuf{ptr: d.zeroPage}, nil
	}
	r, err := d.allocTemp(int64(c.n) * 16)
	if err != nil {
		return rawBuf{}, err
	}
	if err := memcpyDtoD(r.ptr, c.ptr, int64(c.n)*16, d.stream); err != nil {
		d.freeTemp(r)
		return rawBuf{}, err
	}
	return r, nil
}

// finish registers the device tables of dm and the coordinate blocks in
// and out (out == in for submanifold maps; out may be dm.out) in the map
// cache under m, which owns them from then on, and makes the engine m's
// Source. Nothing is downloaded.
func (e *Engine) finish(m *kmap.Map, dm *devMap, in, out coordBlock) {
	me := e.entry(m)
	me.nbr, me.haveNbr = dm.nbr, true
	me.rev, me.haveRev = dm.rev, dm.rev.ptr != 0 // submanifold: derived on first use
	me.nbrMask, me.nbrRank = dm.mask, dm.rank
	dm.mask, dm.rank = rawBuf{}, rawBuf{}
	if dm.gray != nil {
		me.gray[0], dm.gray = dm.gray, nil
	}
	me.inC, me.outC, me.haveIn, me.haveOut = in, out, true, true
	me.sameCoords = in.ptr == out.ptr
	if dm.out.ptr == out.ptr {
		dm.out = rawBuf{}
	}
	dm.nbr, dm.rev = rawBuf{}, rawBuf{}
	m.Source = e.src
}

// SubmanifoldMap builds on the GPU the map of a submanifold convolution
// over coords ([N, 4] Int32 on this engine's device, or host []int32), as
// kmap.NewSubmanifold does: the outputs are the inputs and
// Nbr[o, v] is the row at coords[o] + (k(v) − ⌊K/2⌋)·dilation, or −1.
// The device tables and coordinates are kept in the engine's map cache and
// nothing is downloaded: the returned map's InCoords and OutCoords are the
// caller's slice for host coordinates and nil otherwise, and its Nbr is
// nil until m.Load (see the package notes in kmapgpu.go). Kernel sizes
// must be odd.
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
		in, err := e.d.keepCoords(&c)
		if err != nil {
			return err
		}
		hc := hostSlice(coords)
		m = &kmap.Map{Kind: kmap.Submanifold, Conv: conv, In: ext, Out: ext, NIn: c.n, NOut: c.n, InCoords: hc, OutCoords: hc}
		e.finish(m, dm, in, in)
		return nil
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
	out, err := resampledExtent(op, ext, conv, grid.Conv.StridedExtent)
	if err != nil {
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
		oc := coordBlock{rawBuf: dm.out}
		if outs != nil {
			if oc, err = e.d.keepCoords(outs); err != nil {
				return err
			}
		}
		in, err := e.d.keepCoords(&c)
		if err != nil {
			if outs != nil {
				oc.release(e.d)
			}
			return err
		}
		if oc.lent != nil && oc.lent == in.lent {
			// One buffer for both: one hold, released once (sameCoords).
			oc.release(e.d)
			oc = in
		}
		m = &kmap.Map{Kind: kmap.Strided, Conv: conv, In: ext, Out: out, NIn: c.n, NOut: dm.nOut, InCoords: hostSlice(coords)}
		if outs != nil {
			m.OutCoords = hostSlice(outCoords)
		}
		e.finish(m, dm, in, oc)
		return nil
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
	out, err := resampledExtent(op, ext, conv, grid.Conv.TransposedExtent)
	if err != nil {
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
		in, err := e.d.keepCoords(&c)
		if err != nil {
			return err
		}
		m = &kmap.Map{Kind: kmap.Transposed, Conv: conv, In: ext, Out: out, NIn: c.n, NOut: dm.nOut, InCoords: hostSlice(coords)}
		e.finish(m, dm, in, coordBlock{rawBuf: dm.out})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// InverseMap returns the map from the outputs of the strided map s back to
// exactly its inputs, as kmap.NewInverse does: Nbr is s's reverse table
// and Rev is s.Nbr. The tables and coordinates are copied on the device
// from s's device tables (built by this engine, or uploaded once and the
// reverse derived on the device), so no search runs and nothing is
// computed on or downloaded to the host. The host coordinates alias s's
// when s's host tables are loaded; the rest is left to m.Load, as for the
// other builders.
func (e *Engine) InverseMap(s *kmap.Map) (*kmap.Map, error) {
	const op = "InverseMap"
	if s == nil {
		return nil, fmt.Errorf("%w: cudaext: %s of a nil map", kmap.ErrMap, op)
	}
	if s.Kind != kmap.Strided {
		return nil, fmt.Errorf("%w: cudaext: %s needs a strided map, got a %v map", kmap.ErrMap, op, s.Kind)
	}
	if err := e.checkMap("cudaext: "+op, s); err != nil {
		return nil, err
	}
	if s.Loaded() {
		// Host maps are checked entry by entry, as kmap.NewInverse does;
		// maps built here are valid by construction and stay on the device.
		if err := s.Validate(); err != nil {
			return nil, fmt.Errorf("cudaext: %s: %w", op, err)
		}
	}
	m := &kmap.Map{Kind: kmap.Inverse, Conv: s.Conv, In: s.Out, Out: s.In, NIn: s.NOut, NOut: s.NIn}
	if s.Loaded() {
		m.InCoords, m.OutCoords = s.OutCoords, s.InCoords
	}
	err := e.d.do(func() error {
		d := e.d
		V := s.V()
		sn, err := e.nbrTable(s)
		if err != nil {
			return err
		}
		sr, err := e.revTable(s)
		if err != nil {
			return err
		}
		in, out, err := e.swappedCoords(s)
		if err != nil {
			return err
		}
		dm := &devMap{nIn: m.NIn, nOut: m.NOut, V: V}
		fail := func(err error) error {
			d.freeDevMap(dm)
			d.freeTemp(in)
			d.freeTemp(out)
			return err
		}
		if dm.nbr, err = d.allocTable(m.NOut, V); err != nil {
			return fail(err)
		}
		if dm.rev, err = d.allocTable(m.NIn, V); err != nil {
			return fail(err)
		}
		if err := memcpyDtoD(dm.nbr.ptr, sr, int64(m.NOut)*int64(V)*4, d.stream); err != nil {
			return fail(err)
		}
		if err := memcpyDtoD(dm.rev.ptr, sn, int64(m.NIn)*int64(V)*4, d.stream); err != nil {
			return fail(err)
		}
		e.finish(m, dm, coordBlock{rawBuf: in}, coordBlock{rawBuf: out})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// swappedCoords returns new device copies of s's output and input
// coordinates (an inverse map's input and output coordinates): copied on
// the device from s's cache entry, or uploaded from s's host tables.
// Worker only.
func (e *Engine) swappedCoords(s *kmap.Map) (in, out rawBuf, err error) {
	d := e.d
	me := e.entry(s)
	get := func(have bool, blk rawBuf, host []int32, n int) (rawBuf, error) {
		if have {
			return d.copyCoords(deviceCoords{ptr: blk.ptr, n: n})
		}
		if !s.Loaded() {
			return rawBuf{}, fmt.Errorf("%w: cudaext: InverseMap of a strided map whose tables were released", ErrReleased)
		}
		return uploadSlice(d, host)
	}
	// Only read s's host slices once s is known to be loaded.
	var hostIn, hostOut []int32
	if s.Loaded() {
		hostIn, hostOut = s.InCoords, s.OutCoords
	}
	if in, err = get(me.haveOut, me.outC.rawBuf, hostOut, s.NOut); err != nil {
		return rawBuf{}, rawBuf{}, err
	}
	if out, err = get(me.haveIn, me.inC.rawBuf, hostIn, s.NIn); err != nil {
		d.freeTemp(in)
		return rawBuf{}, rawBuf{}, err
	}
	return in, out, nil
}

// Tables selects the device tables derived from a kernel map.
type Tables uint8

// The derived tables.
const (
	// TablePairs is the per-tap pair lists (kmap.Pairs) of the weight
	// gradient. For a submanifold map they hold the taps before the centre
	// only: tap V−1−v's pairs are tap v's reversed and the centre's are
	// the identity, so the weight gradient reads them mirrored
	// (PairsParams.mirror) — half the lists' time and memory.
	TablePairs Tables = 1 << iota
	// TableMasked is the bitmasks and Gray-code order of Nbr (kmap.Masked)
	// of the masked forward algorithms, and the tile tap unions
	// (kmap.Masked.Tiles) for the tile heights asked for.
	TableMasked
	// TableReverseMasked is what the masked input gradient reads: TableMasked
	// for the reverse table, implying TableReverse, except for submanifold
	// maps, whose input gradient gathers through Nbr with mirrored taps and
	// reads the forward tables (TableMasked; no reverse table).
	TableReverseMasked
	// TableReverse is the reverse table (kmap.Map.Reverse) of the input
	// gradient. Maps built by StridedMap, TransposedMap and InverseMap have
	// it from the build; a submanifold map's (its Nbr with the taps
	// mirrored) is derived when asked for here or on first use.
	TableReverse
	// TablesAll selects every derived table.
	TablesAll = TablePairs | TableMasked | TableReverseMasked | TableReverse
)

// DeriveTables computes the selected derived tables of m on the device
// from its device Nbr (uploaded once if m was built on the host) and keeps
// them in the engine's map cache, so the convolutions that need them find
// them there. The reverse table is derived for TableReverse and, except
// for submanifold maps, TableReverseMasked (inference needs neither). For
// TableMasked and TableReverseMasked it derives the masks and Gray order,
// plus the tile tap unions for each height in tileRows (tile rows,
// kernels.Tile.BM); the unions of any other height are derived by the
// first masked convolution that uses it, cheaply and without a host wait. Tables
// already cached are kept. Nothing waits for the device: for TablePairs
// it counts the pair lists and queues the copy of their sizes, and the
// first weight gradient writes them, when the device has long passed the
// copy (without DeriveTables that weight gradient counts them too, and
// waits for the device behind everything queued before it). TableMasked
// counts them too for a submanifold map small enough for per-tap gathers
// (mayRunPerTap), whose first forward writes them.
func (e *Engine) DeriveTables(m *kmap.Map, which Tables, tileRows ...int) error {
	const op = "cudaext: DeriveTables"
	if err := e.checkMap(op, m); err != nil {
		return err
	}
	for _, r := range tileRows {
		if r <= 0 {
			return fmt.Errorf("%w: %s: tile rows %d (want > 0)", sparse.ErrShape, op, r)
		}
	}
	if m.Kind == kmap.Submanifold && which&TableReverseMasked != 0 {
		which = which&^TableReverseMasked | TableMasked
	}
	return e.d.do(func() error {
		if which&(TableReverse|TableReverseMasked) != 0 {
			if _, err := e.revTable(m); err != nil {
				return err
			}
		}
		// The Gray tables first: the pair lists are then counted from
		// the forward table's masks (Device.pairsCount).
		for _, reverse := range []bool{false, true} {
			if which&TableMasked == 0 && !reverse || which&TableReverseMasked == 0 && reverse {
				continue
			}
			if _, err := e.grayTablesFor(m, reverse); err != nil {
				return err
			}
			for _, rows := range tileRows {
				if _, err := e.maskedTablesFor(m, reverse, rows); err != nil {
					return err
				}
			}
		}
		// The masked gathers of a map small enough to run per tap read
		// the pair lists: counted ahead too, so that they need no wait.
		if which&TablePairs != 0 || which&TableMasked != 0 && e.mayRunPerTap(m) {
			if _, err := e.countPairs(m, true); err != nil {
				return err
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

// pairsChunk is the number of output rows per block of the pair kernels
// (kernels/kmap.cu kChunk).
const pairsChunk = 256

// pairStats summarises the tap segments of pair lists for the
// weight-gradient split heuristic.
type pairStats struct {
	longest int64   // pairs of the longest tap segment
	iters   []int64 // pairs of each tap's segment, by tap
}

// itersOf returns the reduction steps of bk pairs each of the longest
// tap and of all taps together.
func (s pairStats) itersOf(bk int64) (longest, total int64) {
	for _, n := range s.iters {
		total += ceilDiv(n, bk)
	}
	return ceilDiv(s.longest, bk), total
}

// rowMasks are a neighbour table's tap masks on the device, [rows, words]
// uint64 in table order (bit b of word w: tap 64w + b present), as
// masks_build and the brick search write them; ptr 0: none at hand.
type rowMasks struct {
	ptr   devPtr
	words int
}

// pairsCount starts the pair lists of the first taps taps of the table nbr
// [nOut, V] without waiting for the device: it queues the counts of every
// chunk of pairsChunk output rows per tap (from the table's masks when
// given, unless pairsFromTable), their scan into off and the tap
// segments seg, and the copy of seg into page-locked host memory behind
// an event (a segCopy) when ahead, and write finishes the lists; else it
// reads seg at once (a host wait) and writes them. With half (a
// submanifold map) it counts the taps before the centre, taps = (V−1)/2,
// and the lengths the lists report are those of all V taps: tap V−1−v's is
// tap v's and the centre's nOut. off, when the lists are not empty, is the
// first pair of every chunk of pairsChunk output rows of every tap
// ([taps·⌈nOut/pairsChunk⌉] int64, in the segments' numbering;
// fg::PairsParams.off), else a zero rawBuf. A map's lists are counted when
// a caller asks for them ahead (DeriveTables) and written when a weight
// gradient first needs them: by then the device has long passed the copy,
// so the host waits for nothing while the device idles.
func (d *Device) pairsCount(nbr devPtr, masks rowMasks, nOut, V int, half, ahead bool) (*pairBufs, error) {
	p := &pairBufs{half: half, nOut: nOut, V: V, taps: V}
	if half {
		p.taps = (V - 1) / 2
	}
	fail := func(e error) (*pairBufs, error) {
		d.freePairs(p)
		return nil, e
	}
	var err error
	if p.seg, err = d.allocTemp(int64(p.taps+1) * 8); err != nil {
		return fail(err)
	}
	nc := p.chunks()
	if nc == 0 || p.taps == 0 {
		// No rows, or a 1×1×1 submanifold map (the centre, identity, alone):
		// empty lists, nothing to count.
		if err := memsetD8(p.seg.ptr, 0, int64(p.taps+1)*8, d.stream); err != nil {
			return fail(err)
		}
		if err := p.finish(d, make([]int64, p.taps+1)); err != nil {
			return fail(err)
		}
		return p, nil
	}
	cnt, err := d.allocTemp(int64(p.taps) * nc * 4)
	if err != nil {
		return fail(err)
	}
	defer d.freeTemp(cnt) // stream-ordered: reused only behind the scan
	if p.off, err = d.allocTemp(int64(p.taps) * nc * 8); err != nil {
		return fail(err)
	}
	if masks.ptr != 0 && !d.pairsFromTable {
		if err := d.launch("kmap_pairs_count_masks", dim3{X: int(nc)}, dim3{X: pairsChunk}, 0, masks.ptr, int64(nOut), int32(masks.words), int32(p.taps), cnt.ptr, nc); err != nil {
			return fail(err)
		}
		d.maskPairCounts++
	} else if err := d.launch("kmap_pairs_count", dim3{X: int(nc)}, dim3{X: pairsChunk}, 0, nbr, int64(nOut), int32(V), int32(p.taps), cnt.ptr, nc); err != nil {
		return fail(err)
	}
	if err := d.scan(scanI32I64, cnt.ptr, p.off.ptr, int64(p.taps)*nc, p.seg.ptr+devPtr(8*p.taps)); err != nil {
		return fail(err)
	}
	g, b := d.elementwise(int64(p.taps))
	if err := d.launch("kmap_pairs_seg", g, b, 0, p.off.ptr, nc, int32(p.taps), p.seg.ptr); err != nil {
		return fail(err)
	}
	if ahead {
		if p.copy, err = d.segCopyFor(p.taps + 1); err != nil {
			return fail(err)
		}
	}
	if p.copy == nil {
		// Needed now, or more taps than a segCopy holds: read the
		// segments at once.
		seg, err := download[int64](d, p.seg.ptr, p.taps+1)
		if err != nil {
			return fail(err)
		}
		if err := p.finish(d, seg); err != nil {
			return fail(err)
		}
		if err := p.launchWrite(d, nbr); err != nil {
			return fail(err)
		}
		return p, nil
	}
	if err := d.segCopyStart(p.copy, p.seg.ptr, p.taps+1); err != nil {
		return fail(err)
	}
	return p, nil
}

// write finishes lists that pairsCount started: it reads their segments'
// copy (waiting for it, a counted host wait and download, only if the
// device has not passed it yet), the tap lengths and sizes, and writes the
// lists from nbr (the table pairsCount counted). Lists already written are
// left alone.
func (p *pairBufs) write(d *Device, nbr devPtr) error {
	if p.copy == nil {
		return nil
	}
	seg, err := d.segCopyRead(p.copy, p.taps+1)
	if err != nil {
		return err
	}
	d.segCopies = append(d.segCopies, p.copy)
	p.copy = nil
	if err := p.finish(d, seg); err != nil {
		return err
	}
	return p.launchWrite(d, nbr)
}

// launchWrite writes the lists (after finish) from nbr.
func (p *pairBufs) launchWrite(d *Device, nbr devPtr) error {
	if p.in.size == 0 {
		return nil // no pairs
	}
	nc := p.chunks()
	return d.launch("kmap_pairs_write", dim3{X: int(nc)}, dim3{X: pairsChunk}, 0, nbr, int64(p.nOut), int32(p.V), int32(p.taps), p.off.ptr, nc, p.in.ptr, p.out.ptr)
}

// chunks is the number of chunks of pairsChunk output rows (a block of the
// pair kernels each).
func (p *pairBufs) chunks() int64 { return ceilDiv(int64(p.nOut), pairsChunk) }

// finish takes the lists' tap segments seg [taps+1] (read back): their
// lengths for the split heuristic, and the lists' blocks, allocated to
// the total (empty lists: the zero page, and no chunk offsets).
func (p *pairBufs) finish(d *Device, seg []int64) error {
	p.st.iters = make([]int64, p.V)
	if p.half {
		p.st.iters[p.taps] = int64(p.nOut)
		p.st.longest = int64(p.nOut)
	}
	for v := range p.taps {
		p.st.iters[v] = seg[v+1] - seg[v]
		if p.half {
			p.st.iters[p.V-1-v] = p.st.iters[v]
		}
		p.st.longest = max(p.st.longest, p.st.iters[v])
	}
	total := seg[p.taps]
	if total == 0 {
		d.freeTemp(p.off)
		p.off = rawBuf{}
		p.in, p.out = rawBuf{ptr: d.zeroPage}, rawBuf{ptr: d.zeroPage}
		return nil
	}
	var err error
	if p.in, err = d.allocTemp(total * 4); err != nil {
		return err
	}
	p.out, err = d.allocTemp(total * 4)
	return err
}

// freePairs frees the blocks of pair lists, started or written, and hands
// a pending segment copy back (a later copy into it is queued behind this
// one on the same stream, and read only behind its own event).
func (d *Device) freePairs(p *pairBufs) {
	for _, r := range p.bufs() {
		d.freeTemp(r)
	}
	if p.copy != nil {
		d.segCopies = append(d.segCopies, p.copy)
		p.copy = nil
	}
}

// segCopy is page-locked host memory for a pair lists' segment table
// (segCopyTaps + 1 int64) and the event recorded behind its copy.
type segCopy struct {
	host unsafe.Pointer
	ev   cuEvent
}

// segCopyTaps is the most taps whose segment table a segCopy holds (a
// 9×9×9 kernel's 729; larger kernels read theirs at once).
const segCopyTaps = 1023

// segCopyFor returns a free segCopy for n int64 (a new one when none is
// free), or nil when n is more than one holds. Worker only.
func (d *Device) segCopyFor(n int) (*segCopy, error) {
	if n > segCopyTaps+1 {
		return nil, nil
	}
	if k := len(d.segCopies); k > 0 {
		c := d.segCopies[k-1]
		d.segCopies = d.segCopies[:k-1]
		return c, nil
	}
	ev, err := eventCreate()
	if err != nil {
		return nil, err
	}
	h, err := memAllocHost((segCopyTaps + 1) * 8)
	if err != nil {
		_ = eventDestroy(ev)
		return nil, err
	}
	return &segCopy{host: h, ev: ev}, nil
}

// segCopyStart queues the copy of n int64 at src into c behind the work
// queued so far, and records c's event behind it.
func (d *Device) segCopyStart(c *segCopy, src devPtr, n int) error {
	if err := memcpyDtoHAsync(c.host, src, int64(n)*8, d.stream); err != nil {
		return err
	}
	return eventRecord(c.ev, d.stream)
}

// segCopyRead returns the n int64 that segCopyStart copied into c,
// waiting for the copy (a counted host wait and download) only if the
// device has not passed it yet. c stays the caller's to hand back.
func (d *Device) segCopyRead(c *segCopy, n int) ([]int64, error) {
	done, err := eventDone(c.ev)
	if err != nil {
		return nil, err
	}
	if !done {
		d.countDownload(int64(n) * 8)
		if err := eventSync(c.ev); err != nil {
			return nil, err
		}
	}
	return slices.Clone(unsafe.Slice((*int64)(c.host), n)), nil
}

// grayMasks computes the bitmasks [n, W] of the rows of table [n, V] and
// their masked order: sorted stably by the Gray rank of their masks, then
// regrouped (regroupOrder; kmap.Masked's Gray and Order).
func (d *Device) grayMasks(table devPtr, n, V int) (*grayTables, error) {
	if n == 0 {
		return &grayTables{mask: rawBuf{ptr: d.zeroPage}, order: rawBuf{ptr: d.zeroPage}}, nil
	}
	W := (V + 63) / 64
	mask, err := d.allocTemp(int64(n) * int64(W) * 8)
	if err != nil {
		return nil, err
	}
	order, err := d.allocTemp(int64(n) * 4)
	if err != nil {
		d.freeTemp(mask)
		return nil, err
	}
	if err := d.grayOrder(table, n, V, mask.ptr, order.ptr); err != nil {
		d.freeTemp(mask)
		d.freeTemp(order)
		return nil, err
	}
	if err := d.regroupOrder(mask.ptr, order.ptr, n, V); err != nil {
		d.freeTemp(mask)
		d.freeTemp(order)
		return nil, err
	}
	return &grayTables{mask: mask, order: order}, nil
}

// longestFirst reports whether masked gathers of arithmetic m over nt row
// tiles launch them longest first (Device.tileSchedule): from half a row
// tile per SM (with fewer, a gather's blocks are mostly the column tiles
// and split slices of a few row tiles, and the schedule cost (32, 1024, 4)
// 2 % in inference: docs/PERF_NOTES.md, step 28) up to
// longestFirstTilesPerSM per SM, longestFirstTilesPerSMTF32 for tf32.
func (d *Device) longestFirst(nt int64, m kernels.Math) bool {
	sms, perSM := int64(d.info.SMs), d.longestFirstTilesPerSM
	if m == kernels.TF32 {
		perSM = d.longestFirstTilesPerSMTF32
	}
	return 2*nt >= sms && nt <= int64(perSM)*sms
}

// rowsFirst reports whether masked gathers of arithmetic m over nt row
// tiles of a table of n rows launch them in the order of their first rows
// (Device.tileSchedule): where they do not launch them longest first, from
// more than a tile per SM and Device.rowsFirstMin rows on
// (rowsFirstMinRows; the tests lower it), unless EnvNoRowsFirst. The Gray
// order groups the rows by tap mask, so the tiles resident at any time
// hold rows of a few masks from all over the input, each reading rows that
// tiles of the other masks read at other times; launched by their first
// rows (in table order: the masks' rows keep it within the Gray order),
// they hold rows of many masks around one place, which read the same input
// rows while they are in L2 (docs/PERF_NOTES.md, step 32). H200, session
// 14, call 3: the RES 1024 C 64 forward's L2 hit rate 61 → 79 % and DRAM
// 37 → 22 % busy, (1024, 64, 2) fp16 inference −4.5 % and training −1.6 %;
// but (512, 128, 2) +2.0 % and +1.6 %, and (256, 256, 2) ±0.5 %, hence the
// threshold between them.
func (d *Device) rowsFirst(nt, n int64, m kernels.Math) bool {
	return !d.noRowsFirst && n >= d.rowsFirstMin && nt > int64(d.info.SMs) && !d.longestFirst(nt, m)
}

// rowsFirstMinRows is the fewest table rows for which rowsFirst applies:
// above RES 512's 1.03 M rows, at RES 1024's 4.1 M.
const rowsFirstMinRows = 1 << 21

// tileUnions computes the tap unions of tiles of `rows` consecutive
// entries of order over the masks mask [n, W] (kmap.Masked.Tiles). The
// taps block is sized for the worst case (every tile has all V taps), so
// no host wait reads the total.
func (d *Device) tileUnions(mask, order devPtr, n, V, rows int) (t tileTables, err error) {
	rows = max(rows, 1)
	W := (V + 63) / 64
	nt := int64((n + rows - 1) / rows)
	if t.seg, err = d.allocTemp((nt + 1) * 4); err != nil {
		return tileTables{}, err
	}
	fail := func(err error) (tileTables, error) {
		d.freeTemp(t.seg)
		if t.taps.ptr != 0 {
			d.freeTemp(t.taps)
		}
		return tileTables{}, err
	}
	if n == 0 {
		t.taps = rawBuf{ptr: d.zeroPage}
		if err := d.fillI32(t.seg.ptr, 0, 1); err != nil {
			return fail(err)
		}
		return t, nil
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
	g, b := d.elementwise(32 * nt) // a warp per tile
	if err := d.launch("masks_union", g, b, 0, mask, order, int64(n), int32(W), int32(rows), nt, unions.ptr, cnt.ptr); err != nil {
		return fail(err)
	}
	if err := d.unionTaps(&t, unions.ptr, cnt.ptr, nt, W, V); err != nil {
		return fail(err)
	}
	return t, nil
}

// unionTaps finishes tile tables t (t.seg allocated, nt + 1 int32) from
// the tiles' tap unions [nt, W] and tap counts [nt]: the segments by a
// scan of the counts, and the taps, ascending per tile, into t.taps,
// allocated for the worst case (nt · V) so that no host wait sizes it.
func (d *Device) unionTaps(t *tileTables, unions, cnt devPtr, nt int64, W, V int) error {
	if err := d.scan(scanI32, cnt, t.seg.ptr, nt, t.seg.ptr+devPtr(4*nt)); err != nil {
		return err
	}
	var err error
	if t.taps, err = d.allocTemp(nt * int64(V) * 4); err != nil {
		return err
	}
	g, b := d.elementwise(nt)
	return d.launch("masks_taps", g, b, 0, unions, nt, int32(W), t.seg.ptr, t.taps.ptr)
}

// tileSchedule returns the launch order [nt] int32 of the nt row tiles of
// t (tile unions of tiles of `rows` consecutive entries of order, n rows,
// V taps) for masked gathers of arithmetic m: by descending tap count
// (longestFirst) or by first row (rowsFirst), a stable sort either way
// (ties in index order), computed on first use and kept in t; or 0, index
// order. No host wait.
func (d *Device) tileSchedule(t *tileTables, order devPtr, n, V, rows int, m kernels.Math) (devPtr, error) {
	rows = max(rows, 1)
	nt := int64((n + rows - 1) / rows)
	longest := d.longestFirst(nt, m)
	if !longest && !d.rowsFirst(nt, int64(n), m) {
		return 0, nil
	}
	sched := &t.byRows
	if longest {
		sched = &t.longest
	}
	if sched.ptr != 0 {
		return sched.ptr, nil
	}
	keys, err := d.allocTemp(nt * 4)
	if err != nil {
		return 0, err
	}
	defer d.freeTemp(keys)
	g, b := d.elementwise(nt)
	keyBits := bits.Len(uint(V))
	if longest {
		err = d.launch("masks_sched_keys", g, b, 0, t.seg.ptr, nt, int32(V), keys.ptr)
	} else {
		keyBits = bits.Len(uint(n - 1))
		err = d.launch("masks_sched_rows", g, b, 0, order, nt, int32(rows), keys.ptr)
	}
	if err != nil {
		return 0, err
	}
	s, err := d.allocTemp(nt * 4)
	if err != nil {
		return 0, err
	}
	if err := d.radixSort(keys.ptr, s.ptr, nt, false, keyBits, true); err != nil {
		d.freeTemp(s)
		return 0, err
	}
	*sched = s
	return s.ptr, nil
}

// tapsSmem is the dynamic shared memory of the masks kernels that keep
// one int32 per tap in it (masks_build's counts, masks_key_taps' and
// masks_rank's taps): V·4 bytes rounded up to 16, because nvcc reads such
// an array four entries at a time (compute-sanitizer memcheck found
// 16-byte reads past V·4 bytes at V = 27, session 23, and V = 45, session
// 35).
func tapsSmem(V int) int { return (V*4 + 15) &^ 15 }

// grayFromRanks returns the Gray tables of a table [n, V] (V ≤ 32, more
// than kmap.BalancedKeyMaxRows rows) whose masks and uint32 Gray ranks in
// table order were written with it (kmap_nbr_brick): the rows sorted
// stably by rank, as grayOrder, then regrouped (regroupOrder). It takes
// mask over and frees rank, on failure too.
func (d *Device) grayFromRanks(mask, rank rawBuf, n, V int) (*grayTables, error) {
	defer d.freeTemp(rank)
	order, err := d.allocTemp(int64(n) * 4)
	if err != nil {
		d.freeTemp(mask)
		return nil, err
	}
	if err := d.radixSort(rank.ptr, order.ptr, int64(n), false, V, true); err != nil {
		d.freeTemp(mask)
		d.freeTemp(order)
		return nil, err
	}
	if err := d.regroupOrder(mask.ptr, order.ptr, n, V); err != nil {
		d.freeTemp(mask)
		d.freeTemp(order)
		return nil, err
	}
	return &grayTables{mask: mask, order: order}, nil
}

// regroupWindowRows is the window of masks_regroup32/64 (masks.cu's
// kRegroupWindow, whatever their block): package kmap's.
const regroupWindowRows = 2048

// The windows of both engines agree (a compile-time check: a constant
// index other than 0 is out of the one-element array's range).
var _ = [1]struct{}{}[regroupWindowRows-kmap.RegroupWindowRows]

// regroupOrder regroups the Gray order [n] of the masks [n, W] in place
// where kmap.Regroups says so (and not with EnvNoRegroup): the masked
// order of package kmap. EnvRegroupMaxRows moves kmap's upper bound on n
// (d.regroupMaxRows; the orders of larger tables then differ from kmap's).
func (d *Device) regroupOrder(mask, order devPtr, n, V int) error {
	if d.noRegroup || !kmap.RegroupsUpTo(n, (V+63)/64, d.regroupMaxRows) {
		return nil
	}
	return d.regroupWindows(mask, order, n, V)
}

// regroupWindows regroups the order [n] of the single-word masks [n]
// (V ≤ 64) in place, window by window (kmap.RegroupWindow with
// kmap.RegroupTileRows), a block of d.regroupThreads threads per window.
func (d *Device) regroupWindows(mask, order devPtr, n, V int) error {
	if n == 0 {
		return nil
	}
	name := "masks_regroup64"
	if V <= 32 {
		name = "masks_regroup32"
	}
	if d.regroupThreads != regroupKernelThreads {
		name += fmt.Sprintf("_t%d", d.regroupThreads)
	}
	windows := ceilDiv(int64(n), regroupWindowRows)
	return d.launch(name, dim3{X: int(windows)}, dim3{X: d.regroupThreads}, 0, mask, order, int64(n), int32(kmap.RegroupTileRows))
}

// tableMasks returns the bitmasks [n, W] of the rows of table [n, V] in a
// new block (the zero page when n is 0), without the Gray order.
func (d *Device) tableMasks(table devPtr, n, V int) (rawBuf, error) {
	if n == 0 {
		return rawBuf{ptr: d.zeroPage}, nil
	}
	W := (V + 63) / 64
	mask, err := d.allocTemp(int64(n) * int64(W) * 8)
	if err != nil {
		return rawBuf{}, err
	}
	g, b := d.elementwise(int64(n))
	if err := d.launch("masks_build", g, b, 0, table, int64(n), int32(V), int32(W), mask.ptr, devPtr(0)); err != nil {
		d.freeTemp(mask)
		return rawBuf{}, err
	}
	return mask, nil
}

// grayOrder writes the masks [n, W] of table [n, V] to mask and the rows
// sorted stably by the Gray rank of their keys to order (kmap.Masked):
// the key reads the taps in kmap.KeyTaps's order up to
// kmap.BalancedKeyMaxRows rows, in table order above.
func (d *Device) grayOrder(table devPtr, n, V int, mask, order devPtr) error {
	W := (V + 63) / 64
	N := int64(n)
	var tapRows rawBuf // the rows of each tap, or none (table order)
	if n <= kmap.BalancedKeyMaxRows {
		var err error
		if tapRows, err = d.allocZeroI32(int64(V)); err != nil {
			return err
		}
		defer d.freeTemp(tapRows)
	}
	g, b := d.elementwise(N)
	if err := d.launch("masks_build", g, b, tapsSmem(V), table, N, int32(V), int32(W), mask, tapRows.ptr); err != nil {
		return err
	}
	// The key's taps (masks_key_taps), and for 32-bit keys the key bits of
	// each mask byte value.
	narrow := W == 1 && V <= 32
	size := int64(V) * 4
	if narrow {
		size += 4 * 256 * 4
	}
	keyTaps, err := d.allocTemp(size)
	if err != nil {
		return err
	}
	defer d.freeTemp(keyTaps)
	byteKey := devPtr(0)
	if narrow {
		byteKey = keyTaps.ptr + devPtr(V*4)
	}
	if err := d.launch("masks_key_taps", dim3{X: 1}, dim3{X: 256}, tapsSmem(V), tapRows.ptr, int32(V), N, keyTaps.ptr, byteKey); err != nil {
		return err
	}
	if narrow {
		rank, err := d.allocTemp(N * 4)
		if err != nil {
			return err
		}
		defer d.freeTemp(rank)
		if err := d.launch("masks_rank", g, b, 0, mask, N, int32(V), int32(W), keyTaps.ptr, byteKey, devPtr(0), rank.ptr); err != nil {
			return err
		}
		return d.radixSort(rank.ptr, order, N, false, V, true)
	}
	rank, err := d.allocTemp(N * int64(W) * 8)
	if err != nil {
		return err
	}
	defer d.freeTemp(rank)
	if err := d.launch("masks_rank", g, b, tapsSmem(V), mask, N, int32(V), int32(W), keyTaps.ptr, byteKey, rank.ptr, devPtr(0)); err != nil {
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
