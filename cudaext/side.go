//go:build cudaext

package cudaext

import (
	"errors"
	"os"
)

// The side stream. A backward pass asks for a layer's weight gradient,
// its bias gradient and its input gradient one after another; none reads
// another's result, and each leaves SMs idle in its last wave (the weight
// gradient's window split at RES 256: 84 % of the SMs busy, docs/
// PERF_NOTES.md, session 15). onSide queues the first two on a second
// stream after everything queued so far, and the input gradient (doBeside)
// runs on the main stream beside them, free to start on SMs the others
// leave idle. Every other call waits for the side stream first (do joins),
// so callers see results as if all work ran in order. Frees while side
// work may still run are held (sideLedger) until the main stream has
// waited for it; the side stream reuses them at once. Results are the same
// bit for bit: no kernel changes, only when it runs. Measured (H200,
// session 18, step 41): fp16 training steps of small maps 1–3 % faster;
// from RES 64 up the kernels interleave instead, so only calls of at most
// sideMaxRows rows take the side stream.

// sideStream is the Device's side stream and its events.
type sideStream struct {
	stream cuStream
	fork   cuEvent   // recorded on the main stream when a section starts
	ends   []sideEnd // the ends of pending sections, in order
	spare  []cuEvent // recorded events the main stream has waited past
	ledger sideLedger
	in     bool // a section is being queued: d.stream is the side stream
	off    bool // EnvNoSideStream
	// paused > 0: sections run on the main stream (autotuning trials,
	// timed by events on the main stream).
	paused int
	// sections counts the sections queued on the side stream (a test
	// instrument).
	sections int
	// maxRows: only calls over at most this many rows go to the side
	// stream (sideMaxRows; the tests raise it).
	maxRows int64
}

// sideMaxRows is the most rows (a weight gradient's output rows, a bias
// gradient's dy rows) for which onSide queues on the side stream. H200,
// session 18: with the side stream fp16 training steps of (8, 1024, 16),
// (16, 1024, 8) and (32, 1024, 4) (192, 848 and 3,840 rows) took 3.2,
// 2.6 and 1.2 % less time, those of 15 K rows and more (RES 64–1024) within
// ±0.3 % (call 1). One layer's weight, bias and input gradients on random
// data (BenchmarkSideStreamOverlap) ran interleaved rather than in each
// other's idle SMs, the weight gradient ending with the input gradient:
// RES 64 C 1024 1.945 → 2.094 ms in call 6, 1.934 → 1.936 in call 7;
// RES 256 C 256 2.009 → 2.071 and 1.980 → 1.983; RES 16 C 1024 0.261 →
// 0.258 and 0.252 → 0.241. Above this, the main stream alone.
const sideMaxRows = 1 << 13

// sideEnd is the event recorded after the work of section idx.
type sideEnd struct {
	idx int64
	ev  cuEvent
}

// openSide creates the side stream (setup).
func (d *Device) openSide() error {
	d.side.off = os.Getenv(EnvNoSideStream) == "1"
	d.side.maxRows = sideMaxRows
	var err error
	if d.side.stream, err = streamCreate(); err != nil {
		return err
	}
	d.side.fork, err = eventCreateOrdering()
	return err
}

// closeSide waits for the side stream and destroys it and its events
// (teardown).
func (d *Device) closeSide() {
	if d.side.stream == nil {
		return
	}
	_ = streamSync(d.side.stream)
	for _, e := range d.side.ends {
		_ = eventDestroy(e.ev)
	}
	for _, e := range d.side.spare {
		_ = eventDestroy(e)
	}
	if d.side.fork != nil {
		_ = eventDestroy(d.side.fork)
	}
	_ = streamDestroy(d.side.stream)
	d.side = sideStream{}
}

// sideOn reports whether onSide queues on the side stream: not with
// EnvNoSideStream, not while a profile times every launch on the main
// stream, and not during autotuning trials.
func (d *Device) sideOn() bool {
	return d.side.stream != nil && !d.side.off && d.side.paused == 0 && d.prof == nil
}

// pauseSide adds delta to the count of reasons to keep sections on the
// main stream (autotuning trials); safe from any goroutine.
func (d *Device) pauseSide(delta int) {
	d.mu.Lock()
	d.side.paused += delta
	d.mu.Unlock()
}

// onSide runs f, which queues the work of one call over rows rows, on the
// side stream after all the work queued so far (see the side stream
// above); without it (sideOn false, more than side.maxRows rows, or inside
// a section already) f runs on the current stream. Worker only.
func (d *Device) onSide(rows int64, f func() error) error {
	if !d.sideOn() || rows > d.side.maxRows || d.side.in {
		return f()
	}
	if err := eventRecord(d.side.fork, d.mainStream); err != nil {
		return err
	}
	if err := streamWaitEvent(d.side.stream, d.side.fork); err != nil {
		return err
	}
	idx := d.side.ledger.open()
	d.side.sections++
	d.stream, d.side.in = d.side.stream, true
	err := f()
	d.stream, d.side.in = d.mainStream, false
	if e := d.endSection(idx); e != nil {
		// Without its end event the section cannot be waited for: wait
		// for both streams on the host and release every held block.
		_ = streamSync(d.side.stream)
		_, released := d.side.ledger.join()
		d.releaseSide(released)
		return errors.Join(err, e)
	}
	return err
}

// endSection records the end of section idx on the side stream.
func (d *Device) endSection(idx int64) error {
	var ev cuEvent
	if n := len(d.side.spare); n > 0 {
		ev, d.side.spare = d.side.spare[n-1], d.side.spare[:n-1]
	} else {
		var err error
		if ev, err = eventCreateOrdering(); err != nil {
			return err
		}
	}
	if err := eventRecord(ev, d.side.stream); err != nil {
		d.side.spare = append(d.side.spare, ev)
		return err
	}
	d.side.ends = append(d.side.ends, sideEnd{idx: idx, ev: ev})
	return nil
}

// joinSide makes the main stream wait for every pending section and
// returns the held blocks to the cache (do, before every call but the
// independent ones). Worker only.
func (d *Device) joinSide() error {
	return d.waitSide(d.side.ledger.join())
}

// besideSide is joinSide for an independent call (doBeside): the main
// stream waits only for the sections opened before the previous
// independent call (sideLedger.beside). Worker only.
func (d *Device) besideSide() error {
	return d.waitSide(d.side.ledger.beside())
}

// waitSide makes the main stream wait for the end of section upTo (none
// when negative; none either when syncAll has waited for it) and returns
// released to the cache.
func (d *Device) waitSide(upTo int64, released []sideBlock) error {
	if upTo < 0 {
		return nil
	}
	var last cuEvent
	keep := d.side.ends[:0]
	for _, e := range d.side.ends {
		if e.idx <= upTo {
			if last != nil {
				d.side.spare = append(d.side.spare, last)
			}
			last = e.ev
			continue
		}
		keep = append(keep, e)
	}
	d.side.ends = keep
	if last != nil {
		if err := streamWaitEvent(d.mainStream, last); err != nil {
			// The main stream cannot be ordered after the side stream:
			// wait on the host instead.
			if err := streamSync(d.side.stream); err != nil {
				return err
			}
		}
		d.side.spare = append(d.side.spare, last)
	}
	d.releaseSide(released)
	return nil
}

// releaseSide returns released blocks to the cache.
func (d *Device) releaseSide(released []sideBlock) {
	for _, b := range released {
		d.cacheBlock(devPtr(b.ptr), b.size)
	}
}

// syncAll waits on the host for both streams and returns every held block
// to the cache (flushCache, teardown): nothing queued uses them any more.
// The sections stay pending, so a section being queued (allocRaw's
// out-of-memory path) is still waited for when it ends.
func (d *Device) syncAll() error {
	err := streamSync(d.mainStream)
	if d.side.stream != nil {
		err = errors.Join(err, streamSync(d.side.stream))
		for _, e := range d.side.ends {
			d.side.spare = append(d.side.spare, e.ev)
		}
		d.side.ends = nil
		d.releaseSide(d.side.ledger.releaseAll())
	}
	return err
}
