//go:build cudaext

package cudaext

// The GPU hash table of voxel coordinates (kernels/hash.cu,
// kernels/hashtable.cuh): open addressing with linear probing over
// 2^lg slots, exact keys grid.Extent.Key (32-bit slots when every key of
// the extent fits, else 64-bit), atomicCAS inserts with a bounded probe
// count. A build reports through a small status array read back after the
// kernel: coordinates outside the extent, duplicate rows (exactly the pair
// the CPU builders name), and a table that ran out of probes, which is
// rebuilt larger (auto-sized tables) or reported with hash.ErrFull (fixed
// ones) — never a hang.

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/hash"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// Status words (kernels/hashtable.cuh, enum Status).
const (
	stFlags    = 0
	stMaxProbe = 1
	stBadRow   = 2
	stCount    = 3
	stDupLo    = 4
	stDupHi    = 5
	stAux      = 6
	stWords    = 8

	flagFull  = 1
	flagDup   = 2
	flagRange = 4
	flagAux   = 8

	groupBits     = 2    // kGroupBits
	maxProbeLimit = 4096 // probes an insert into an auto-sized table may make
)

// deviceStatus is the host copy of the status words.
type deviceStatus [stWords]int32

func newStatus() deviceStatus {
	return deviceStatus{stBadRow: math.MaxInt32, stDupLo: -1, stDupHi: -1, stAux: math.MaxInt32}
}

// dup returns the duplicate pair (r, q) recorded by hash_find_dups.
func (s deviceStatus) dup() (r, q int32, ok bool) {
	if s[stDupLo] == -1 && s[stDupHi] == -1 {
		return 0, 0, false
	}
	return s[stDupHi], s[stDupLo], true
}

// statusBuf is a device status array. Worker only.
type statusBuf struct{ raw rawBuf }

func (d *Device) newStatusBuf() (statusBuf, error) {
	r, err := d.allocTemp(stWords * 4)
	if err != nil {
		return statusBuf{}, err
	}
	s := newStatus()
	if err := uploadTo(d, r.ptr, s[:]); err != nil {
		d.freeTemp(r)
		return statusBuf{}, err
	}
	return statusBuf{r}, nil
}

func (s statusBuf) ptr() devPtr { return s.raw.ptr }

// read waits for the device and returns the status words.
func (s statusBuf) read(d *Device) (deviceStatus, error) {
	var out deviceStatus
	err := d.copyToHost(unsafe.Pointer(&out[0]), s.raw.ptr, stWords*4)
	return out, err
}

// statusOf runs launch with a fresh device status array (its kernels'
// status argument), waits for the device once and returns the status
// words. Worker only.
func (d *Device) statusOf(launch func(status devPtr) error) (deviceStatus, error) {
	sb, err := d.newStatusBuf()
	if err != nil {
		return deviceStatus{}, err
	}
	defer d.freeTemp(sb.raw)
	if err := launch(sb.ptr()); err != nil {
		return deviceStatus{}, err
	}
	return sb.read(d)
}

// tableArg mirrors fgx::Table.
type tableArg struct {
	Slots                   uint64
	Lg, Wide, Limit, Probes int32
}

func (a *tableArg) argBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(a)), unsafe.Sizeof(*a))
}

// devTable is a device hash table. Worker only, except through CoordIndex.
type devTable struct {
	mem   rawBuf  // the slots
	buf   *Buffer // owner of mem for long-lived tables, else nil
	lg    int
	wide  bool
	limit int
	probe int // lookups probe at most this many slots
	n     int64
}

func (t *devTable) arg() *tableArg {
	w := int32(0)
	if t.wide {
		w = 1
	}
	return &tableArg{Slots: uint64(t.mem.ptr), Lg: int32(t.lg), Wide: w, Limit: int32(t.limit), Probes: int32(t.probe)}
}

func (t *devTable) slots() int64 { return 1 << t.lg }

// newDevTable allocates an empty table of 2^lg slots; the keys of ext
// decide the layout. With keep the slots are a Buffer (freed by the
// garbage collector if the owner forgets), else a temporary block.
func (d *Device) newDevTable(lg int, ext grid.Extent, limit int, keep bool) (*devTable, error) {
	wide := ext.KeyBits() > 32
	words := int64(1) << lg
	if wide {
		words *= 2
	}
	t := &devTable{lg: lg, wide: wide, limit: min(limit, 1<<lg)}
	if keep {
		b, err := d.newBuffer(sparse.Int32, int(2*words))
		if err != nil {
			return nil, err
		}
		t.buf, t.mem = b, rawBuf{ptr: b.ptr, size: b.size}
	} else {
		mem, err := d.allocTemp(words * 8)
		if err != nil {
			return nil, err
		}
		t.mem = mem
	}
	if err := d.fillI32(t.mem.ptr, -1, words*2); err != nil {
		d.freeTable(t)
		return nil, err
	}
	return t, nil
}

// freeTable releases the slots of t.
func (d *Device) freeTable(t *devTable) {
	if t == nil {
		return
	}
	if t.buf != nil {
		t.buf.Free()
	} else {
		d.freeTemp(t.mem)
	}
	t.mem, t.buf = rawBuf{}, nil
}

// tableLog returns log2 of the slot count for n keys at load ≤ 1/2 (at
// least 8 slots).
func tableLog(n int64) int { return tableLogPer(n, 2) }

// tableLogPer returns log2 of the slot count for n keys with at least
// perKey slots per key (at least 8 slots).
func tableLogPer(n, perKey int64) int {
	lg := groupBits + 1
	for int64(1)<<lg < perKey*n {
		lg++
	}
	return lg
}

// mapSlotsPerKey is the slots per key of the temporary input tables of the
// map builders (load ≤ 1/4, half the load of other tables): they are
// probed up to V times per row and most probes of a surface miss, and a
// miss walks the probe run to an empty slot, which is about 2.4 slots at
// load 1/2 and 1.4 at load 1/4 (linear probing, 1/2·(1 + 1/(1 − α)²)).
const mapSlotsPerKey = 4

// coordError is a coordinate problem found on the device, reported with
// the sentinels of kmap and sparse (errors.Is works with both).
type coordError struct {
	msg   string
	kinds []error
}

func (e *coordError) Error() string   { return e.msg }
func (e *coordError) Unwrap() []error { return e.kinds }

func rangeError(prefix string, r int64, c []int32, ext grid.Extent) error {
	return &coordError{
		msg:   fmt.Sprintf("cudaext: %srow %d (%d, %d, %d, %d) is outside %v", prefix, r, c[0], c[1], c[2], c[3], ext),
		kinds: []error{kmap.ErrOutOfRange, sparse.ErrOutOfRange},
	}
}

func duplicateError(prefix string, q, r int32, c []int32) error {
	return &coordError{
		msg:   fmt.Sprintf("cudaext: %srows %d and %d are both (%d, %d, %d, %d)", prefix, q, r, c[0], c[1], c[2], c[3]),
		kinds: []error{kmap.ErrDuplicate, sparse.ErrDuplicate, hash.ErrDuplicate},
	}
}

// hashCoords builds a table of the n rows of coords ([n, 4] int32 on the
// device) in ext: key(row) → row. lg ≤ 0 sizes the table for load ≤ 1/2
// and rebuilds it larger if an insert runs out of probes; lg > 0 fixes
// 2^lg slots and reports a full table as hash.ErrFull. Rows outside ext
// and duplicate rows are errors naming the first such row (prefix starts
// the message). The caller frees the table.
func (d *Device) hashCoords(coords devPtr, n int64, ext grid.Extent, lg int, keep bool, prefix string) (*devTable, error) {
	return d.hashCoordsPer(coords, n, ext, lg, 2, keep, prefix)
}

// hashCoordsPer is hashCoords with perKey slots per key for auto-sized
// tables (lg ≤ 0).
func (d *Device) hashCoordsPer(coords devPtr, n int64, ext grid.Extent, lg int, perKey int64, keep bool, prefix string) (*devTable, error) {
	if n >= math.MaxInt32 {
		return nil, &coordError{msg: fmt.Sprintf("cudaext: %s%d rows overflow 32-bit row indices", prefix, n),
			kinds: []error{kmap.ErrTooLarge, sparse.ErrIndexOverflow}}
	}
	fixed := lg > 0
	limit := maxProbeLimit
	if !fixed {
		lg = tableLogPer(n, perKey)
	} else {
		lg = max(lg, groupBits+1)
		limit = 1 << lg
	}
	for attempt := 0; ; attempt++ {
		t, err := d.newDevTable(lg, ext, limit, keep)
		if err != nil {
			return nil, err
		}
		t.n = n
		st, err := d.insertCoords(t, coords, n, ext)
		if err != nil {
			d.freeTable(t)
			return nil, err
		}
		if st[stFlags]&flagRange != 0 {
			d.freeTable(t)
			r := int64(st[stBadRow])
			c, err := download[int32](d, coords+devPtr(16*r), 4)
			if err != nil {
				return nil, err
			}
			return nil, rangeError(prefix, r, c, ext)
		}
		if st[stFlags]&flagFull != 0 {
			d.freeTable(t)
			if fixed || attempt == 2 {
				return nil, fmt.Errorf("%w: cudaext: %sdevice hash table of %d slots holds no free slot within %d probes for %d keys",
					hash.ErrFull, prefix, int64(1)<<lg, limit, n)
			}
			lg += 2
			continue
		}
		t.probe = int(st[stMaxProbe]) + 1
		if st[stFlags]&flagDup != 0 {
			err := d.findDups(t, coords, n, ext, prefix)
			d.freeTable(t)
			return nil, err
		}
		return t, nil
	}
}

// hashCoordsThen is hashCoordsPer's first attempt (an auto-sized table of
// perKey slots per key) without its drain of the stream: it inserts the
// rows, queues the copy of the inserts' status into page-locked memory,
// runs then on the table (whose lookups probe up to the table's limit, not
// the longest insert's probe) and only then waits, for the status copy
// alone, so the device works through then's kernels while the host reads
// the status instead of idling between the inserts and them (a submanifold
// map's build: session 13). ok is false, with nothing to free here, when
// the status reports anything — rows outside ext, duplicates, a full table
// — and the caller discards what then made and calls hashCoordsPer, which
// grows the table or names the rows.
func (d *Device) hashCoordsThen(coords devPtr, n int64, ext grid.Extent, perKey int64, then func(*devTable) error) (t *devTable, ok bool, err error) {
	if n >= math.MaxInt32 {
		return nil, false, nil // hashCoordsPer names the overflow
	}
	if t, err = d.newDevTable(tableLogPer(n, perKey), ext, maxProbeLimit, false); err != nil {
		return nil, false, err
	}
	t.n, t.probe = n, t.limit
	fail := func(err error) (*devTable, bool, error) {
		d.freeTable(t)
		return nil, false, err
	}
	sb, err := d.newStatusBuf()
	if err != nil {
		return fail(err)
	}
	defer d.freeTemp(sb.raw) // stream-ordered: reused only behind the copy
	if err := d.launchInsert(t, coords, n, ext, sb.ptr()); err != nil {
		return fail(err)
	}
	if err := d.queueStatusCopy(sb); err != nil {
		return fail(err)
	}
	if err := then(t); err != nil {
		return fail(err)
	}
	st, err := d.queuedStatus()
	if err != nil {
		return fail(err)
	}
	if st[stFlags] != 0 {
		return fail(nil)
	}
	t.probe = int(st[stMaxProbe]) + 1
	return t, true, nil
}

// queueStatusCopy queues the copy of sb's words into page-locked memory
// and an event behind it, for queuedStatus to wait for: the device works
// through what the caller queues in between while the host waits for the
// copy alone. One copy at a time. Worker only.
func (d *Device) queueStatusCopy(sb statusBuf) error {
	if d.statusHost == nil {
		ev, err := eventCreate()
		if err != nil {
			return err
		}
		p, err := memAllocHost(stWords * 4)
		if err != nil {
			_ = eventDestroy(ev)
			return err
		}
		d.statusHost, d.statusEv = p, ev
	}
	d.countDownload(stWords * 4)
	if err := memcpyDtoHAsync(d.statusHost, sb.ptr(), stWords*4, d.stream); err != nil {
		return err
	}
	return eventRecord(d.statusEv, d.stream)
}

// queuedStatus waits for queueStatusCopy's copy and returns the words.
// Worker only.
func (d *Device) queuedStatus() (deviceStatus, error) {
	if err := eventSync(d.statusEv); err != nil {
		return deviceStatus{}, err
	}
	return deviceStatus(unsafe.Slice((*int32)(d.statusHost), stWords)), nil
}

// insertCoords runs hash_insert_coords and returns the status.
func (d *Device) insertCoords(t *devTable, coords devPtr, n int64, ext grid.Extent) (deviceStatus, error) {
	return d.statusOf(func(status devPtr) error { return d.launchInsert(t, coords, n, ext, status) })
}

// launchInsert queues hash_insert_coords of the n rows of coords into t,
// reporting into the status block at status.
func (d *Device) launchInsert(t *devTable, coords devPtr, n int64, ext grid.Extent, status devPtr) error {
	if n == 0 {
		return nil
	}
	g, b := d.elementwise(n)
	return d.launch("hash_insert_coords", g, b, 0, d.addr(coords), n, extOf(ext), t.arg(), status)
}

// findDups names the smallest duplicated row r and the first row q with
// its coordinate, as the CPU builders do.
func (d *Device) findDups(t *devTable, coords devPtr, n int64, ext grid.Extent, prefix string) error {
	st, err := d.statusOf(func(status devPtr) error {
		g, b := d.elementwise(n)
		return d.launch("hash_find_dups", g, b, 0, coords, n, extOf(ext), t.arg(), status)
	})
	if err != nil {
		return err
	}
	r, q, ok := st.dup()
	if !ok {
		return errors.New("cudaext: internal error: the hash build saw a duplicate key that the check did not find")
	}
	c, err := download[int32](d, coords+devPtr(16*int64(r)), 4)
	if err != nil {
		return err
	}
	return duplicateError(prefix, q, r, c)
}

// lookupCoords writes to out (int32 [m]) the row of each of the m query
// coordinates, −1 where absent or outside ext.
func (d *Device) lookupCoords(t *devTable, queries devPtr, m int64, ext grid.Extent, out devPtr) error {
	if m == 0 {
		return nil
	}
	g, b := d.elementwise(m)
	return d.launch("hash_lookup_coords", g, b, 0, queries, m, extOf(ext), t.arg(), out)
}

// CoordIndex is a GPU hash table of the rows of a device coordinate
// matrix: it finds the row of any (batch, x, y, z) in bulk. It is the
// device counterpart of hash.FromCoords and is safe for concurrent use.
// Call Free when done (the garbage collector is the fallback).
type CoordIndex struct {
	e   *Engine
	t   *devTable // slots owned by t.buf
	ext grid.Extent
	n   int
}

// NewCoordIndex builds the index of coords ([N, 4] Int32, on this engine's
// device or on the host) in ext. Rows outside ext (sparse.ErrOutOfRange)
// and repeated rows (sparse.ErrDuplicate) are errors naming the first
// offending row. N = 0 gives an empty index.
func (e *Engine) NewCoordIndex(coords sparse.Matrix, ext grid.Extent) (*CoordIndex, error) {
	return e.newCoordIndex(coords, ext, 0)
}

// newCoordIndex is NewCoordIndex with a fixed table of 2^lg slots when
// lg > 0 (for tests of the full-table path).
func (e *Engine) newCoordIndex(coords sparse.Matrix, ext grid.Extent, lg int) (*CoordIndex, error) {
	if err := ext.Validate(); err != nil {
		return nil, fmt.Errorf("cudaext: NewCoordIndex: %w", err)
	}
	ix := &CoordIndex{e: e, ext: ext}
	err := e.d.do(func() error {
		c, err := e.coordsOn("NewCoordIndex", coords)
		if err != nil {
			return err
		}
		defer c.release(e.d)
		ix.n = c.n
		ix.t, err = e.d.hashCoords(c.ptr, int64(c.n), ext, lg, true, "NewCoordIndex: ")
		return err
	})
	if err != nil {
		return nil, err
	}
	return ix, nil
}

// Len returns the number of indexed rows.
func (ix *CoordIndex) Len() int { return ix.n }

// Extent returns the grid of the index.
func (ix *CoordIndex) Extent() grid.Extent { return ix.ext }

// MaxProbe returns the largest distance of a stored key from its home slot.
func (ix *CoordIndex) MaxProbe() int { return ix.t.probe - 1 }

// Slots returns the number of slots of the table.
func (ix *CoordIndex) Slots() int { return int(ix.t.slots()) }

// Lookup returns the rows [M, 1] Int32 of the query coordinates ([M, 4]
// Int32, device or host): the indexed row with that coordinate, or −1 for
// absent and out-of-grid queries.
func (ix *CoordIndex) Lookup(queries sparse.Matrix) (sparse.Matrix, error) {
	if ix.t.buf == nil || ix.t.buf.freed.Load() {
		return sparse.Matrix{}, fmt.Errorf("%w: CoordIndex used after Free", ErrFreed)
	}
	e := ix.e
	var out *Buffer
	err := e.d.do(func() error {
		q, err := e.coordsOn("CoordIndex.Lookup", queries)
		if err != nil {
			return err
		}
		defer q.release(e.d)
		if out, err = e.d.newBuffer(sparse.Int32, q.n); err != nil {
			return err
		}
		return e.d.lookupCoords(ix.t, q.ptr, int64(q.n), ix.ext, out.ptr)
	})
	if err != nil {
		out.Free()
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: out.n, Cols: 1, Data: out}, nil
}

// Free releases the table.
func (ix *CoordIndex) Free() { ix.t.buf.Free() }

// deviceCoords is a [n, 4] int32 coordinate array on the device: the
// caller's buffer or a temporary upload of host coordinates.
type deviceCoords struct {
	ptr devPtr
	n   int
	tmp rawBuf  // non-zero when uploaded here
	buf *Buffer // the caller's buffer, when given on the device
}

// release frees the upload made for c, unless a map kept it (keepCoords).
func (c *deviceCoords) release(d *Device) {
	if c.tmp.ptr != 0 {
		d.freeTemp(c.tmp)
	}
}

// coordsOn returns m ([N, 4] Int32 on this device, or a host []int32) as a
// device array. Worker only.
func (e *Engine) coordsOn(op string, m sparse.Matrix) (deviceCoords, error) {
	return e.int32RowsOn(op, "coordinates", 4, m)
}

// int32RowsOn returns m ([N, cols] Int32 on this device, or a host []int32,
// uploaded to a temporary) as a device array of N rows; what names the rows
// in errors. Worker only.
func (e *Engine) int32RowsOn(op, what string, cols int, m sparse.Matrix) (deviceCoords, error) {
	if h, ok := m.Data.([]int32); ok {
		if m.Cols != cols || m.Rows < 0 || len(h) != cols*m.Rows {
			return deviceCoords{}, fmt.Errorf("%w: cudaext: %s: %s are %s with %d elements, want [N, %d]", sparse.ErrShape, op, what, m.Shape(), len(h), cols)
		}
		if m.Rows == 0 {
			return deviceCoords{ptr: e.d.zeroPage}, nil
		}
		tmp, err := e.d.allocTemp(int64(len(h)) * 4)
		if err != nil {
			return deviceCoords{}, err
		}
		if err := uploadTo(e.d, tmp.ptr, h); err != nil {
			e.d.freeTemp(tmp)
			return deviceCoords{}, err
		}
		return deviceCoords{ptr: tmp.ptr, n: m.Rows, tmp: tmp}, nil
	}
	b, err := e.buffer(m, what)
	if err != nil {
		return deviceCoords{}, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if b.dtype != sparse.Int32 || m.Cols != cols {
		return deviceCoords{}, fmt.Errorf("%w: cudaext: %s: %s are %v %s, want Int32 [N, %d]", sparse.ErrShape, op, what, b.dtype, m.Shape(), cols)
	}
	return deviceCoords{ptr: e.d.addr(b.ptr), n: m.Rows, buf: b}, nil
}
