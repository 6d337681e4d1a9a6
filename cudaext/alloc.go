//go:build cudaext

package cudaext

import (
	"fmt"
	"math/bits"
	"runtime"
	"sort"
	"sync/atomic"
	"time"

	"github.com/flexgemm-go/flexgemm/sparse"
)

// allocator is a caching device allocator: freed blocks are kept in free
// lists by rounded size and handed out again, so steady-state work makes no
// cuMemAlloc/cuMemFree calls. All memory is plain device memory (never
// managed memory). Worker only.
type allocator struct {
	free  map[int64][]devPtr
	stats MemStats
}

const (
	minBlock  = 512     // the smallest block
	largeUnit = 2 << 20 // the coarsest rounding step
	classBits = 5       // 2^classBits size classes per octave
)

// roundSize returns the block size used for a request of n > 0 bytes: n
// rounded up to a multiple of 1/32 of its octave, at least 512 bytes and
// at most 2 MiB, so that a block wastes under 1/32 of its size (or 2 MiB)
// — the bench's peaks count blocks, and torch, which FlexGEMM's are
// measured with, rounds to 512 bytes — while steady-state work, which
// repeats its sizes, still reuses cached blocks.
func roundSize(n int64) int64 {
	if n <= minBlock {
		return minBlock
	}
	step := int64(1) << max(0, bits.Len64(uint64(n-1))-1-classBits)
	step = min(max(step, minBlock), largeUnit)
	return (n + step - 1) / step * step
}

// allocRaw returns a device block of at least n bytes and its rounded size.
// n == 0 gives the null pointer. On out-of-memory the cache is released,
// then the Go GC is run so that unreachable buffers give their memory
// back, before the request fails with ErrOutOfMemory.
func (d *Device) allocRaw(n int64) (devPtr, int64, error) {
	if n < 0 {
		return 0, 0, fmt.Errorf("cudaext: negative allocation of %d bytes", n)
	}
	if n == 0 {
		return 0, 0, nil
	}
	size := roundSize(n)
	a := &d.mem
	if d.side.in {
		// Blocks held for the side stream are free for its own work.
		if p, ok := d.side.ledger.take(size); ok {
			a.stats.CacheHits++
			return devPtr(p), size, nil
		}
	}
	if l := a.free[size]; len(l) > 0 {
		p := l[len(l)-1]
		a.free[size] = l[:len(l)-1]
		a.stats.Cached -= size
		a.stats.CacheHits++
		a.use(size)
		return p, size, nil
	}
	p, err := memAlloc(size)
	for attempt := 0; err != nil && attempt < 2; attempt++ {
		de, ok := err.(*DriverError)
		if !ok || de.Code != cuErrOutOfMemory {
			return 0, 0, err
		}
		if attempt == 1 {
			// Let the GC find dropped buffers; their cleanups queue frees.
			runtime.GC()
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
		}
		d.drainPending()
		d.flushCache()
		p, err = memAlloc(size)
	}
	if err != nil {
		if de, ok := err.(*DriverError); ok && de.Code == cuErrOutOfMemory {
			free, total, _ := memInfo()
			return 0, 0, fmt.Errorf("%w: allocating %d bytes (%s) on %s: %s in use by this engine, %s free of %s",
				ErrOutOfMemory, n, human(n), d.info.Name, human(a.stats.InUse), human(free), human(total))
		}
		return 0, 0, err
	}
	a.stats.DriverAllocs++
	a.use(size)
	return p, size, nil
}

func (a *allocator) use(size int64) {
	a.stats.InUse += size
	a.stats.PeakInUse = max(a.stats.PeakInUse, a.stats.InUse)
	a.stats.PeakReserved = max(a.stats.PeakReserved, a.stats.InUse+a.stats.Cached)
}

// freeRaw returns a block to the cache. Work already queued on the main
// stream that uses the block runs before any later reuse; while work on
// the side stream may still use it, it is held (still in use) until the
// main stream has waited for that work (sideLedger).
func (d *Device) freeRaw(p devPtr, size int64) {
	if p == 0 || size == 0 {
		return
	}
	if d.side.in || d.side.ledger.pending() {
		d.side.ledger.hold(uint64(p), size)
		return
	}
	d.cacheBlock(p, size)
}

// cacheBlock puts a block no queued work uses into the cache.
func (d *Device) cacheBlock(p devPtr, size int64) {
	a := &d.mem
	a.free[size] = append(a.free[size], p)
	a.stats.InUse -= size
	a.stats.Cached += size
}

// flushCache gives every cached block back to the driver.
func (d *Device) flushCache() {
	if d.mainStream != nil {
		d.waits.Add(1)
		_ = d.syncAll()
	}
	a := &d.mem
	sizes := make([]int64, 0, len(a.free))
	for s := range a.free {
		sizes = append(sizes, s)
	}
	sort.Slice(sizes, func(i, j int) bool { return sizes[i] < sizes[j] })
	for _, s := range sizes {
		for _, p := range a.free[s] {
			_ = memFree(p)
			a.stats.Cached -= s
		}
		delete(a.free, s)
	}
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Buffer is device memory holding Len elements of one DType. It implements
// sparse.Storage, so a sparse.Matrix can hold it as Data; the Engine that
// made it owns it. Call Free when done (the memory returns to the engine's
// cache); a buffer that becomes unreachable is freed by the GC as a
// fallback.
//
// A kernel map built from device coordinates borrows their buffer instead
// of copying it (SubmanifoldMap, StridedMap, TransposedMap): Free may be
// called at any time, and the memory returns to the cache once the buffer
// is freed and every map holding it is dropped. Do not write into a
// coordinate buffer while maps built from it are in use.
type Buffer struct {
	dev   *Device
	ptr   devPtr
	size  int64 // rounded bytes reserved
	dtype sparse.DType
	n     int
	freed atomic.Bool
	// holds counts who keeps the memory: the owner until Free, and each
	// kernel map that borrowed the buffer (borrow, drop).
	holds   atomic.Int32
	cleanup runtime.Cleanup
}

// DType returns the element type.
func (b *Buffer) DType() sparse.DType { return b.dtype }

// Len returns the number of elements.
func (b *Buffer) Len() int { return b.n }

// Bytes returns the bytes of the elements (not the rounded reservation).
func (b *Buffer) Bytes() int64 { return int64(b.n) * int64(b.dtype.Size()) }

// Ptr returns the device address (0 for an empty buffer).
func (b *Buffer) Ptr() uint64 { return uint64(b.ptr) }

// Free returns the memory to the engine's cache, at once or, for
// coordinates a kernel map borrowed, when the last such map is dropped.
// Using the buffer afterwards is an error (ErrFreed); freeing twice is a
// no-op.
func (b *Buffer) Free() {
	if b == nil || !b.freed.CompareAndSwap(false, true) {
		return
	}
	b.cleanup.Stop()
	b.drop()
}

// borrow makes the caller a holder of b's memory (a kernel map keeping
// coordinates), or reports false when b was already freed by its owner
// with no other holder left (its memory may be reused).
func (b *Buffer) borrow() bool {
	for {
		h := b.holds.Load()
		if h == 0 {
			return false
		}
		if b.holds.CompareAndSwap(h, h+1) {
			return true
		}
	}
}

// drop ends one hold of b's memory (Free ends the owner's); the last one
// returns the memory to the cache after the work already queued.
func (b *Buffer) drop() {
	if b.holds.Add(-1) == 0 && b.ptr != 0 {
		d, p, s := b.dev, b.ptr, b.size
		d.later(func() { d.freeRaw(p, s) })
	}
}

// String implements fmt.Stringer for Buffer.
func (b *Buffer) String() string {
	return fmt.Sprintf("cudaext.Buffer{%v × %d on %s}", b.dtype, b.n, b.dev.info.Name)
}

type blockRef struct {
	dev  *Device
	ptr  devPtr
	size int64
}

// newBuffer allocates a buffer of n elements. Worker only.
func (d *Device) newBuffer(dt sparse.DType, n int) (*Buffer, error) {
	if n < 0 {
		return nil, fmt.Errorf("%w: buffer of %d elements", sparse.ErrShape, n)
	}
	p, size, err := d.allocRaw(int64(n) * int64(dt.Size()))
	if err != nil {
		return nil, err
	}
	b := &Buffer{dev: d, ptr: p, size: size, dtype: dt, n: n}
	b.holds.Store(1)
	if p != 0 {
		b.cleanup = runtime.AddCleanup(b, func(r blockRef) {
			r.dev.later(func() { r.dev.freeRaw(r.ptr, r.size) })
		}, blockRef{d, p, size})
	}
	return b, nil
}

// rawBuf is an allocator block not wrapped in a Buffer (kernel-map tables,
// split-K partials, temporaries). Worker only.
type rawBuf struct {
	ptr  devPtr
	size int64
}

func (d *Device) allocTemp(bytes int64) (rawBuf, error) {
	p, s, err := d.allocRaw(bytes)
	return rawBuf{p, s}, err
}

// allocZeroI32 returns temporary memory of n int32 words, zeroed on the
// stream (free it with freeTemp; freed already when the fill fails).
func (d *Device) allocZeroI32(n int64) (rawBuf, error) {
	r, err := d.allocTemp(4 * n)
	if err != nil {
		return rawBuf{}, err
	}
	if err := d.fillI32(r.ptr, 0, n); err != nil {
		d.freeTemp(r)
		return rawBuf{}, err
	}
	return r, nil
}

func (d *Device) freeTemp(r rawBuf) {
	if r.ptr != d.zeroPage {
		d.freeRaw(r.ptr, r.size)
	}
}

// addr returns p, or the zero page for the null pointer, so that kernels
// always see a valid address for operands that may be empty.
func (d *Device) addr(p devPtr) devPtr {
	if p == 0 {
		return d.zeroPage
	}
	return p
}
