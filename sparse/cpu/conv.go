package cpu

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// checkMap loads the kernel map's host tables (kmap.Map.Load: maps built
// on a device keep them there until asked) and validates the table against
// its row counts. Every entry must be −1 or a valid input row, so the
// kernels never index out of range.
func checkMap(op string, m *kmap.Map) error {
	if m == nil {
		return fmt.Errorf("%w: %s: nil kernel map", ErrMap, op)
	}
	if err := m.Load(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMap, op, err)
	}
	V := m.V()
	if V <= 0 || m.NIn < 0 || m.NOut < 0 {
		return fmt.Errorf("%w: %s: kernel volume %d, %d inputs, %d outputs", ErrMap, op, V, m.NIn, m.NOut)
	}
	if len(m.Nbr) != m.NOut*V {
		return fmt.Errorf("%w: %s: table has %d entries, want %d·%d", ErrMap, op, len(m.Nbr), m.NOut, V)
	}
	nIn := int32(m.NIn)
	for j, i := range m.Nbr {
		if i < -1 || i >= nIn {
			return fmt.Errorf("%w: %s: table entry [%d, %d] = %d is not −1 or an input row < %d", ErrMap, op, j/V, j%V, i, m.NIn)
		}
	}
	return nil
}

func checkLen(op, arg string, got, rows, cols int) error {
	if rows < 0 || cols < 0 {
		return fmt.Errorf("%w: %s: %s has negative shape [%d, %d]", ErrShape, op, arg, rows, cols)
	}
	if got != rows*cols {
		return fmt.Errorf("%w: %s: %s has %d elements, want [%d, %d] = %d", ErrShape, op, arg, got, rows, cols, rows*cols)
	}
	return nil
}

// Forward computes the sparse convolution over kernel map m:
//
//	y[o, :] = bias + Σ_v w[:, v, :] · x[m.Nbr[o·V+v], :]     (absent neighbours skipped)
//
// Shapes: x [m.NIn, ci]; w [co, V·ci] (the weight [co, Kx, Ky, Kz, ci]
// flattened); bias [co] or nil; y [m.NOut, co], overwritten. The result is
// bit-identical for any GOMAXPROCS.
func Forward[T Float](m *kmap.Map, x []T, ci int, w []T, co int, bias []T, y []T, opt Options) error {
	const op = "Forward"
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
	if err := checkLen(op, "weight", len(w), co, V*ci); err != nil {
		return err
	}
	if bias != nil {
		if err := checkLen(op, "bias", len(bias), 1, co); err != nil {
			return err
		}
	}
	if err := checkLen(op, "y", len(y), m.NOut, co); err != nil {
		return err
	}
	opt = opt.Resolve(ci, co)
	kern := kernelFor[T](co)
	p := &gatherProblem[T]{
		kern: kern, rows: m.NOut, V: V, table: m.Nbr, in: x, K: ci, N: co,
		bias: bias, out: y, masked: m.Masked, opt: opt,
	}
	p.bp = packForward(w, co, V, ci, kern.nr)
	p.run()
	return nil
}

// InputGrad computes the gradient of Forward with respect to x:
//
//	dx[i, :] = Σ_v w[:, v, :]ᵀ · dy[Rev[i·V+v], :]
//
// with Rev = m.Reverse(), each input row gathering from the outputs it fed
// (no scatter, no atomics). Shapes: dy [m.NOut, co]; w [co, V·ci]; dx
// [m.NIn, ci], overwritten. The masked methods use m.ReverseMasked().
func InputGrad[T Float](m *kmap.Map, dy []T, co int, w []T, ci int, dx []T, opt Options) error {
	const op = "InputGrad"
	if err := opt.Validate(); err != nil {
		return err
	}
	if err := checkMap(op, m); err != nil {
		return err
	}
	V := m.V()
	if err := checkLen(op, "dy", len(dy), m.NOut, co); err != nil {
		return err
	}
	if err := checkLen(op, "weight", len(w), co, V*ci); err != nil {
		return err
	}
	if err := checkLen(op, "dx", len(dx), m.NIn, ci); err != nil {
		return err
	}
	if m.NIn == 0 {
		return nil
	}
	opt = opt.Resolve(co, ci)
	kern := kernelFor[T](ci)
	p := &gatherProblem[T]{
		kern: kern, rows: m.NIn, V: V, table: m.Reverse(), in: dy, K: co, N: ci,
		out: dx, masked: m.ReverseMasked, opt: opt,
	}
	p.bp = packInputGrad(w, co, V, ci, kern.nr)
	p.run()
	return nil
}

func checkLenErr(op string, ndy, co, ndb int) error {
	return fmt.Errorf("%w: %s: dy has %d elements and db %d for %d channels", ErrShape, op, ndy, ndb, co)
}
