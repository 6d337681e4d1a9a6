package cudaext

// sideLedger is the host's record of the side stream (Device.onSide): the
// sections of work queued there (one engine call's kernels each, in order)
// that the main stream has not yet been made to wait for, and the
// allocator blocks freed while such a section may still use them.
//
// A block freed while sections are pending is held, tagged with the last
// section opened at that time: the side stream may still read or write it
// up to the end of that section. The main stream may reuse it only after
// waiting for that section's end (release, join); the side stream may
// reuse it at once (take), since a later section runs after every earlier
// one and after the main-stream work queued before it began.
//
// The policy that keeps two calls overlapping: an independent call on the
// main stream (Device.doBeside: a weight gradient's input gradient) waits
// only for the sections opened before the previous independent call —
// in a backward pass, the layer above's weight and bias gradients —, so
// it runs beside the sections opened since (this layer's), while the
// blocks freed between the two calls come back one layer later. Every
// other call joins: it waits for all sections and releases every block.
// Pure bookkeeping, no driver calls: it is tested without a GPU.
type sideLedger struct {
	next   int64 // index of the next section
	joined int64 // the main stream waits for every section below this
	// indep: sections below this index were opened before the last
	// independent call began.
	indep  int64
	blocks []sideBlock // held, in the order they were freed
}

// sideBlock is an allocator block held for the side stream.
type sideBlock struct {
	ptr  uint64
	size int64
	tag  int64 // the last section opened when it was freed
}

// pending reports whether sections may still be running that the main
// stream has not been made to wait for.
func (l *sideLedger) pending() bool { return l.joined < l.next }

// open starts a section and returns its index.
func (l *sideLedger) open() int64 {
	l.next++
	return l.next - 1
}

// hold records a block freed while sections are pending (pending must be
// true).
func (l *sideLedger) hold(ptr uint64, size int64) {
	l.blocks = append(l.blocks, sideBlock{ptr: ptr, size: size, tag: l.next - 1})
}

// take removes a held block of exactly size for work on the side stream,
// the one freed last; ok is false when none is held.
func (l *sideLedger) take(size int64) (ptr uint64, ok bool) {
	for i := len(l.blocks) - 1; i >= 0; i-- {
		if b := l.blocks[i]; b.size == size {
			l.blocks = append(l.blocks[:i], l.blocks[i+1:]...)
			return b.ptr, true
		}
	}
	return 0, false
}

// join is what a call that depends on everything does: wait is the
// section the main stream must wait for the end of (−1: none), and
// released the blocks it may reuse from then on (all held blocks).
func (l *sideLedger) join() (wait int64, released []sideBlock) {
	if !l.pending() {
		return -1, nil
	}
	wait, released = l.next-1, l.blocks
	l.joined, l.indep, l.blocks = l.next, l.next, nil
	return wait, released
}

// beside is what an independent call does (see sideLedger): it waits for
// the sections opened before the previous independent call (wait, −1 for
// none) and reuses the blocks freed while only those were pending
// (released, in the order they were freed).
func (l *sideLedger) beside() (wait int64, released []sideBlock) {
	upTo := l.indep - 1
	l.indep = l.next
	if upTo < l.joined {
		return -1, nil
	}
	l.joined = upTo + 1
	kept := l.blocks[:0]
	for _, b := range l.blocks {
		if b.tag <= upTo {
			released = append(released, b)
		} else {
			kept = append(kept, b)
		}
	}
	l.blocks = kept // kept reuses the front of blocks; released is its own slice
	return upTo, released
}

// releaseAll returns every held block, the sections staying pending: for a
// host that has waited for both streams.
func (l *sideLedger) releaseAll() []sideBlock {
	b := l.blocks
	l.blocks = nil
	return b
}

// heldBytes returns the bytes of the held blocks.
func (l *sideLedger) heldBytes() int64 {
	var n int64
	for _, b := range l.blocks {
		n += b.size
	}
	return n
}
