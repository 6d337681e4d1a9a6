package cudaext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSideLedgerBackward follows the ledger through the calls of a
// three-layer backward pass as the bench and the Gorgonia ops issue them
// (weight gradient and bias gradient on the side stream, then the input
// gradient beside them, then the frees of the layer's gradient and input):
// each input gradient waits only for the layer above's sections, the
// side stream reuses held blocks at once, and the final join releases
// the rest.
func TestSideLedgerBackward(t *testing.T) {
	const (
		part  = 1 << 20 // a weight gradient's split-K partials
		small = 4096    // a bias gradient's partials
		act   = 3 << 20 // a layer's activation or gradient
	)
	var l sideLedger
	require.False(t, l.pending())
	wait, rel := l.join()
	require.Equal(t, int64(-1), wait, "nothing to join before any section")
	require.Empty(t, rel)

	type held = map[uint64]int64 // ptr → tag
	heldNow := func() held {
		h := held{}
		for _, b := range l.blocks {
			h[b.ptr] = b.tag
		}
		return h
	}
	ptrs := func(bs []sideBlock) []uint64 {
		var p []uint64
		for _, b := range bs {
			p = append(p, b.ptr)
		}
		return p
	}

	// Layer 2: sections 0 (weight gradient) and 1 (bias gradient).
	require.Equal(t, int64(0), l.open())
	l.hold(100, part)
	require.Equal(t, int64(1), l.open())
	l.hold(101, small)
	require.True(t, l.pending())
	wait, rel = l.beside()
	require.Equal(t, int64(-1), wait, "the first input gradient runs beside layer 2's sections")
	require.Empty(t, rel)
	l.hold(102, act) // dy of layer 2
	l.hold(103, act) // input of layer 2
	require.Equal(t, held{100: 0, 101: 1, 102: 1, 103: 1}, heldNow())
	require.Equal(t, int64(part+small+2*act), l.heldBytes())

	// Layer 1: sections 2 and 3 reuse held blocks on the side stream.
	require.Equal(t, int64(2), l.open())
	p, ok := l.take(part)
	require.True(t, ok)
	require.Equal(t, uint64(100), p)
	l.hold(200, part)
	require.Equal(t, int64(3), l.open())
	p, ok = l.take(small)
	require.True(t, ok)
	require.Equal(t, uint64(101), p)
	_, ok = l.take(12345)
	require.False(t, ok, "no held block of that size")
	l.hold(201, small)
	wait, rel = l.beside()
	require.Equal(t, int64(1), wait, "layer 1's input gradient waits for layer 2's sections only")
	require.Equal(t, []uint64{102, 103}, ptrs(rel))
	require.Equal(t, held{200: 2, 201: 3}, heldNow())
	l.hold(202, act)
	l.hold(203, act)
	require.True(t, l.pending())

	// Layer 0 has no input gradient: its sections end the pass.
	require.Equal(t, int64(4), l.open())
	l.hold(300, part)
	require.Equal(t, int64(5), l.open())
	wait, rel = l.join()
	require.Equal(t, int64(5), wait)
	require.ElementsMatch(t, []uint64{200, 201, 202, 203, 300}, ptrs(rel))
	require.False(t, l.pending())
	require.Empty(t, l.blocks)
	require.Zero(t, l.heldBytes())

	// With no section opened since the last independent call, beside
	// waits for everything and releases everything.
	l.open()
	l.hold(400, act)
	_, _ = l.beside() // indep → 7
	wait, rel = l.beside()
	require.Equal(t, int64(6), wait)
	require.Equal(t, []uint64{400}, ptrs(rel))
	require.False(t, l.pending())
	wait, _ = l.beside()
	require.Equal(t, int64(-1), wait, "nothing pending")
}
