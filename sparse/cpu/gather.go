package cpu

import (
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// gatherProblem is the GEMM shared by the forward pass and the input
// gradient:
//
//	out[r, :] = bias + Σ_v in[table[r·V+v], :] · B_v     (absent rows skipped)
//
// with in [nIn, K], B_v [K, N] packed by packForward/packInputGrad, out
// [rows, N].
type gatherProblem[T Float] struct {
	kern    microKernel[T]
	rows, V int
	table   []int32
	in      []T
	K, N    int
	bp      []T
	bias    []T
	out     []T
	masked  func() *kmap.Masked
	opt     Options
}

// panels returns the number of nr-wide column panels and the padded row
// length of the tile accumulators.
func (p *gatherProblem[T]) panels() (np, ldc int) {
	np = (p.N + p.kern.nr - 1) / p.kern.nr
	return np, np * p.kern.nr
}

// run dispatches on the method.
func (p *gatherProblem[T]) run() {
	if p.rows == 0 || p.N == 0 {
		return
	}
	switch p.opt.Method {
	case Explicit:
		p.explicit()
	case Implicit:
		p.tiled(false, 1)
	case ImplicitSplitK:
		p.tiled(false, p.opt.SplitK)
	case Masked:
		p.tiled(true, 1)
	case MaskedSplitK:
		p.tiled(true, p.opt.SplitK)
	}
}

// tileScratch is one worker's buffers.
type tileScratch[T Float] struct {
	a    []T   // gathered rows
	c    []T   // tile accumulators [tm+1, ldc]; row tm is the dump row
	coff []int // accumulator row offsets of the gathered rows
}

// writeRows stores the accumulators of rows [0, n) of a tile into out,
// tile row r going to out row rowOf(r), adding the bias.
func (p *gatherProblem[T]) writeRows(c []T, ldc, n int, rowOf func(r int) int) {
	N := p.N
	for r := range n {
		dst := p.out[rowOf(r)*N : rowOf(r)*N+N]
		src := c[r*ldc : r*ldc+N]
		if p.bias == nil {
			copy(dst, src)
			continue
		}
		for j, x := range src {
			dst[j] = x + p.bias[j]
		}
	}
}

// explicitBlockElems bounds the im2col block of Explicit, in elements.
const explicitBlockElems = 1 << 20

// explicit multiplies blocks of the im2col matrix [R, V·K] by the packed
// weight [V·K, N], one GEMM per block.
func (p *gatherProblem[T]) explicit() {
	mr, nr := p.kern.mr, p.kern.nr
	V, K := p.V, p.K
	VK := V * K
	np, ldc := p.panels()
	R := roundUp(max(1, min(p.opt.TileRows, explicitBlockElems/max(1, VK))), mr)
	nb := (p.rows + R - 1) / R
	scr := make([]tileScratch[T], workersFor(nb))
	parallelFor(nb, func(w, blk int) {
		s := &scr[w]
		if s.c == nil {
			s.a = make([]T, R*VK)
			s.c = make([]T, (R+1)*ldc)
			s.coff = make([]int, R)
		}
		lo := blk * R
		n := min(R, p.rows-lo)
		clear(s.c)
		for r := range n {
			gatherRows(s.a[r*VK:(r+1)*VK], K, p.in, K, 0, p.table[(lo+r)*V:(lo+r+1)*V], K)
		}
		for r := range R {
			if r < n {
				s.coff[r] = r * ldc
			} else {
				s.coff[r] = R * ldc
			}
		}
		if VK > 0 {
			nrb := (n + mr - 1) / mr
			for j := range np {
				b := p.bp[j*VK*nr:]
				c := s.c[j*nr:]
				for rb := range nrb {
					p.kern.fn(VK, s.a[rb*mr*VK:], VK, 1, b, nr, c, s.coff[rb*mr:])
				}
			}
		}
		p.writeRows(s.c, ldc, n, func(r int) int { return lo + r })
	})
}

// segment is a piece of a tile's reduction: taps v, channels [k0, k1).
type segment struct{ v, k0, k1 int }

// segments cuts chunk s of S of the reduction over taps (each K wide) into
// per-tap pieces. The reduction has len(taps)·K positions; chunk s covers
// [T·s/S, T·(s+1)/S).
func segments(dst []segment, taps []int32, K, s, S int) []segment {
	T := len(taps) * K
	lo, hi := T*s/S, T*(s+1)/S
	dst = dst[:0]
	for pos := lo; pos < hi; {
		t, k0 := pos/K, pos%K
		k1 := min(K, k0+hi-pos)
		dst = append(dst, segment{v: int(taps[t]), k0: k0, k1: k1})
		pos += k1 - k0
	}
	return dst
}

// tiled runs Implicit (masked = false) or Masked (masked = true) with the
// reduction split into S chunks (S = 1: no split).
//
// A tile is TileRows consecutive rows: of the natural order for Implicit,
// of the Gray-code order for Masked. For each reduction segment (tap v,
// channels [k0, k1)) the tile gathers its rows' neighbours into a packed
// block and accumulates the block times B_v[k0:k1, :] into the tile's
// accumulators. Implicit gathers every row of the tile for every tap (an
// absent neighbour gives a zero row); Masked visits only the tile's union
// taps and gathers only the rows that have the tap.
//
// With S > 1 every (tile, chunk) pair is computed separately into its own
// partial buffer, and the partials of a tile are then summed in chunk
// order. Nothing depends on which goroutine runs what, so the result is
// the same for any GOMAXPROCS.
func (p *gatherProblem[T]) tiled(masked bool, S int) {
	mr, nr := p.kern.mr, p.kern.nr
	V, K, N := p.V, p.K, p.N
	np, ldc := p.panels()
	tm := max(1, p.opt.TileRows)
	nt := (p.rows + tm - 1) / tm
	S = max(1, S)

	var order []int32 // tile rows: order[t·tm : …] (masked) or t·tm + r
	var tiles *kmap.Tiles
	allTaps := make([]int32, V)
	for v := range allTaps {
		allTaps[v] = int32(v)
	}
	if masked {
		ms := p.masked()
		order = ms.Order
		tiles = ms.Tiles(tm)
	}

	var partial []T // [S][rows·N] for S > 1, indexed by tile position
	if S > 1 {
		partial = make([]T, S*p.rows*N)
	}
	tmp := roundUp(tm, mr)
	type scratch struct {
		tileScratch[T]
		rows, idx []int32
		segs      []segment
	}
	items := nt * S
	scr := make([]scratch, workersFor(items))
	parallelFor(items, func(w, item int) {
		s := &scr[w]
		if s.c == nil {
			s.a = make([]T, tmp*K)
			s.c = make([]T, (tm+1)*ldc)
			s.coff = make([]int, tmp)
			s.rows = make([]int32, tm)
			s.idx = make([]int32, tm)
		}
		t, chunk := item/S, item%S
		lo := t * tm
		n := min(tm, p.rows-lo)
		rows := s.rows[:n]
		for r := range rows {
			if order != nil {
				rows[r] = order[lo+r]
			} else {
				rows[r] = int32(lo + r)
			}
		}
		taps := allTaps
		if tiles != nil {
			taps = tiles.Taps[tiles.Seg[t]:tiles.Seg[t+1]]
		}
		clear(s.c[:n*ldc])
		clear(s.c[tm*ldc:]) // the dump row, so it never drifts to Inf or NaN
		s.segs = segments(s.segs, taps, K, chunk, S)
		for _, sg := range s.segs {
			v, kw := sg.v, sg.k1-sg.k0
			cnt := 0
			if masked {
				// Only the rows that have tap v.
				for r, row := range rows {
					if i := p.table[int(row)*V+v]; i >= 0 {
						s.idx[cnt] = i
						s.coff[cnt] = r * ldc
						cnt++
					}
				}
			} else {
				// Every row; an absent neighbour gathers a zero row.
				for r, row := range rows {
					s.idx[r] = p.table[int(row)*V+v]
					s.coff[r] = r * ldc
				}
				cnt = n
			}
			if cnt == 0 {
				continue
			}
			gatherRows(s.a, kw, p.in, K, sg.k0, s.idx[:cnt], kw)
			nrb := (cnt + mr - 1) / mr
			for r := cnt; r < nrb*mr; r++ {
				s.coff[r] = tm * ldc // the dump row
			}
			b := p.bp[(v*K+sg.k0)*nr:]
			for rb := range nrb {
				a := s.a[rb*mr*kw:]
				coff := s.coff[rb*mr:]
				for j := range np {
					p.kern.fn(kw, a, kw, 1, b[j*V*K*nr:], nr, s.c[j*nr:], coff)
				}
			}
		}
		if S == 1 {
			p.writeTile(s.c, ldc, rows)
			return
		}
		part := partial[chunk*p.rows*N:]
		for r := range n {
			copy(part[(lo+r)*N:(lo+r+1)*N], s.c[r*ldc:r*ldc+N])
		}
	})
	if S == 1 {
		return
	}
	parallelFor(nt, func(_, t int) {
		lo := t * tm
		n := min(tm, p.rows-lo)
		for r := range n {
			row := lo + r
			if order != nil {
				row = int(order[lo+r])
			}
			dst := p.out[row*N : row*N+N]
			copy(dst, partial[(lo+r)*N:(lo+r+1)*N])
			for chunk := 1; chunk < S; chunk++ {
				src := partial[(chunk*p.rows+lo+r)*N:]
				for j := range dst {
					dst[j] += src[j]
				}
			}
			if p.bias != nil {
				for j := range dst {
					dst[j] += p.bias[j]
				}
			}
		}
	})
}

// writeTile stores tile accumulator row r into out row rows[r], adding the
// bias.
func (p *gatherProblem[T]) writeTile(c []T, ldc int, rows []int32) {
	N := p.N
	for r, row := range rows {
		dst := p.out[int(row)*N : int(row)*N+N]
		src := c[r*ldc : r*ldc+N]
		if p.bias == nil {
			copy(dst, src)
			continue
		}
		for j, x := range src {
			dst[j] = x + p.bias[j]
		}
	}
}
