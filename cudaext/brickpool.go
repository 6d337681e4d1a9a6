package cudaext

// The brick search's pool (kmap_brick_scatter, kmap_nbr_brick) holds 64
// cells per brick, and the brick count is known only once the inserts
// have run. Waiting for it before the scatter idles the device while the
// host reads the count and launches the rest of the map (about 0.1 ms of
// a 2–8 ms step at 0.25–1 M rows: docs/PERF_NOTES.md, step 58), so the
// pool is sized by a guess from the last builds instead, the count read
// while the search runs, and the search repeated over a pool of the count
// in the rare build that had more bricks than the guess. This file holds
// the guess, without the cudaext build tag, so its tests run without a
// GPU.

import "math"

// brickHistory is the number of past builds whose bricks per row
// brickRatios.guess takes the largest of: a network that builds maps of a
// few kinds in turn (a UNet's levels) keeps the sparsest kind's ratio.
const brickHistory = 4

// brickGuessSlack is the pool's room beyond the largest recent ratio, as
// a fraction (1/16: a build whose bricks per row grew by less than 6 %
// still fits), and brickGuessMin the fewest bricks a guessed pool holds.
const (
	brickGuessSlack = 1.0 / 16
	brickGuessMin   = 64
)

// brickRatios are the bricks per row of the last brickHistory brick
// searches, newest at next − 1 (zero: no build).
type brickRatios struct {
	ratio [brickHistory]float64
	next  int
}

// note records a build of n rows in nb bricks.
func (h *brickRatios) note(n, nb int64) {
	if n <= 0 {
		return
	}
	h.ratio[h.next] = float64(nb) / float64(n)
	h.next = (h.next + 1) % brickHistory
}

// guess returns the pool (in bricks) for a build of n rows: the largest
// recent ratio times n, with brickGuessSlack more and at least
// brickGuessMin, at most n (a brick per row); 0 when no build is recorded,
// which sends the search to wait for the count.
func (h *brickRatios) guess(n int64) int64 {
	r := 0.0
	for _, x := range h.ratio {
		r = max(r, x)
	}
	if r <= 0 || n <= 0 {
		return 0
	}
	g := int64(math.Ceil(r * float64(n) * (1 + brickGuessSlack)))
	return min(n, max(g, brickGuessMin))
}
