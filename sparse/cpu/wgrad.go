package cpu

import (
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// wgradChunk is the number of pairs gathered at a time by the weight
// gradient; the kernels accumulate in registers over a chunk and add into
// the tap's accumulators after it. It is fixed so results do not depend on
// the machine.
const wgradChunk = 256

// wgradMaxPairs bounds the pairs of one work item of the non-split weight
// gradient: a tap with more pairs is cut into ⌈P/wgradMaxPairs⌉ equal
// chunks summed in order, so that maps with few taps (a 1×1×1 kernel) still
// use every core. It depends only on the map, never on GOMAXPROCS.
const wgradMaxPairs = 1 << 15

// WeightGrad computes the gradient of Forward with respect to w:
//
//	dw[:, v, :] = Σ_{(i, o) ∈ pairs(v)} dy[o, :] ⊗ x[i, :]
//
// as one GEMM per tap over the tap's pairs (m.Pairs()). For the split-K
// methods every tap's pairs are cut into SplitK fixed chunks whose partial
// gradients are summed in chunk order; the other methods cut only taps of
// more than 32768 pairs, into chunks of at most that many. Shapes: x [m.NIn, ci]; dy
// [m.NOut, co]; dw [co, V·ci], overwritten.
func WeightGrad[T Float](m *kmap.Map, x []T, ci int, dy []T, co int, dw []T, opt Options) error {
	const op = "WeightGrad"
	if err := opt.Validate(); err != nil {
		return err
	}
	if err := checkMap(op, m); err != nil {
		return err
	}
	V := m.V()
	if err := checkLen(op, "x", len(x), m.NIn, ci); err != nil {
		return err
	}
	if err := checkLen(op, "dy", len(dy), m.NOut, co); err != nil {
		return err
	}
	if err := checkLen(op, "dw", len(dw), co, V*ci); err != nil {
		return err
	}
	clear(dw)
	if ci == 0 || co == 0 {
		return nil
	}
	opt = opt.Resolve(ci, co)
	S := 0 // chunks per tap from the pair count
	if opt.Method.SplitK() {
		S = opt.SplitK
	}
	weightGrad(m.Pairs(), V, x, ci, dy, co, dw, S)
	return nil
}

// weightGrad computes dw_v = Σ_p a[ia_p] ⊗ b[ib_p] per tap, a GEMM whose
// reduction runs over the tap's pairs, gathered wgradChunk at a time. Its
// rows (the kernel's mr side) and columns (nr side) are ci and co or co and
// ci, whichever pads less. Each tap's pairs are cut into S equal chunks
// (S = 0: ⌈P_v/wgradMaxPairs⌉ chunks), computed as separate work items and
// summed in chunk order.
func weightGrad[T Float](pairs *kmap.Pairs, V int, x []T, ci int, dy []T, co int, dw []T, S int) {
	// Rows of the GEMM come from a (width M, indices ia), columns from b
	// (width N, indices ib); element (m, n) of tap v goes to dw[at(v, m, n)].
	a, M, ia := x, ci, pairs.In
	b, N, ib := dy, co, pairs.Out
	at := func(v, m, n int) int { return (n*V+v)*ci + m }
	kern := kernelFor[T](co)
	if alt := kernelFor[T](ci); roundUp(co, alt.mr)*roundUp(ci, alt.nr) < roundUp(ci, kern.mr)*roundUp(co, kern.nr) {
		kern = alt
		a, M, ia = dy, co, pairs.Out
		b, N, ib = x, ci, pairs.In
		at = func(v, m, n int) int { return (m*V+v)*ci + n }
	}
	mr, nr := kern.mr, kern.nr
	np := (N + nr - 1) / nr
	ldb := np * nr
	mp := roundUp(M, mr)

	type scratch struct {
		a, b, c []T
		coff    []int
	}
	// Work items: chunk c of tap v is item first[v]+c; taps cut into more
	// than one chunk keep their partial sums at partial[pbase[v]+c·M·N].
	chunks := make([]int, V)
	first := make([]int, V+1)
	pbase := make([]int, V)
	nPartial := 0
	for v := range V {
		chunks[v] = S
		if S == 0 {
			chunks[v] = max(1, int((pairs.Seg[v+1]-pairs.Seg[v]+wgradMaxPairs-1)/wgradMaxPairs))
		}
		first[v+1] = first[v] + chunks[v]
		if chunks[v] > 1 {
			pbase[v] = nPartial
			nPartial += chunks[v] * M * N
		}
	}
	partial := make([]T, nPartial)
	tapOf := make([]int32, first[V])
	for v := range V {
		for i := first[v]; i < first[v+1]; i++ {
			tapOf[i] = int32(v)
		}
	}
	items := first[V]
	scr := make([]scratch, workersFor(items))
	parallelFor(items, func(w, item int) {
		s := &scr[w]
		if s.c == nil {
			s.a = make([]T, wgradChunk*M+mr)
			s.b = make([]T, wgradChunk*ldb)
			s.c = make([]T, (mp+1)*ldb)
			s.coff = make([]int, mp)
			for r := range mp {
				if r < M {
					s.coff[r] = r * ldb
				} else {
					s.coff[r] = mp * ldb
				}
			}
		}
		v := int(tapOf[item])
		chunk, nc := item-first[v], chunks[v]
		seg0, seg1 := int(pairs.Seg[v]), int(pairs.Seg[v+1])
		lo := seg0 + (seg1-seg0)*chunk/nc
		hi := seg0 + (seg1-seg0)*(chunk+1)/nc
		clear(s.c)
		for p0 := lo; p0 < hi; p0 += wgradChunk {
			kc := min(wgradChunk, hi-p0)
			gatherRows(s.a, M, a, M, 0, ia[p0:p0+kc], M)
			gatherRows(s.b, ldb, b, N, 0, ib[p0:p0+kc], N)
			for j := range np {
				bj := s.b[j*nr:]
				c := s.c[j*nr:]
				for rb := 0; rb < mp; rb += mr {
					kern.fn(kc, s.a[rb:], 1, M, bj, ldb, c, s.coff[rb:])
				}
			}
		}
		if nc == 1 {
			for mm := range M {
				row := s.c[mm*ldb : mm*ldb+N]
				for n, val := range row {
					dw[at(v, mm, n)] = val
				}
			}
			return
		}
		part := partial[pbase[v]+chunk*M*N:]
		for mm := range M {
			copy(part[mm*N:(mm+1)*N], s.c[mm*ldb:mm*ldb+N])
		}
	})
	if nPartial == 0 {
		return
	}
	parallelFor(V, func(_, v int) {
		nc := chunks[v]
		if nc == 1 {
			return
		}
		base := partial[pbase[v]:]
		for mm := range M {
			for n := range N {
				sum := base[mm*N+n]
				for chunk := 1; chunk < nc; chunk++ {
					sum += base[chunk*M*N+mm*N+n]
				}
				dw[at(v, mm, n)] = sum
			}
		}
	})
}

// biasChunk is the number of rows BiasGrad sums per partial; fixed so the
// result does not depend on the machine.
const biasChunk = 2048

// BiasGrad computes db[c] = Σ_r dy[r, c], the gradient of Forward with
// respect to bias. Shapes: dy [rows, co]; db [co], overwritten. Rows are
// summed in fixed chunks whose partial sums are added in order.
func BiasGrad[T Float](dy []T, co int, db []T) error {
	if co < 0 || len(db) != co || (co == 0 && len(dy) != 0) || (co > 0 && len(dy)%co != 0) {
		return checkLenErr("BiasGrad", len(dy), co, len(db))
	}
	clear(db)
	if co == 0 {
		return nil
	}
	rows := len(dy) / co
	nc := (rows + biasChunk - 1) / biasChunk
	partial := make([]T, nc*co)
	parallelFor(nc, func(_, k int) {
		sum := partial[k*co : (k+1)*co]
		for r := k * biasChunk; r < min(rows, (k+1)*biasChunk); r++ {
			for c, v := range dy[r*co : (r+1)*co] {
				sum[c] += v
			}
		}
	})
	for k := range nc {
		for c, v := range partial[k*co : (k+1)*co] {
			db[c] += v
		}
	}
	return nil
}
