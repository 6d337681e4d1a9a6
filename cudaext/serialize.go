//go:build cudaext

package cudaext

// Serialisation codes on the GPU (kernels/serialize.cu): the z-order and
// Hilbert codes of package sparse/serialize, bit for bit.
//
// Device codes are uint64, which sparse.DType has no name for: they are
// held as [N, 2] Int32 matrices whose row r is the low and the high 32
// bits of code r (little-endian words). ToHost gives those words;
// CodesToHost and CodesToDevice convert to and from []uint64.

import (
	"fmt"
	"math"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/serialize"
)

// codeArgs checks mode and ext and returns the code bits per axis and the
// Hilbert flag.
func codeArgs(op string, mode serialize.Mode, ext grid.Extent) (int32, int32, int, error) {
	if err := mode.Valid(); err != nil {
		return 0, 0, 0, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	axis, batch, err := serialize.Bits(ext)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	h := int32(0)
	if mode == serialize.Hilbert {
		h = 1
	}
	return int32(axis), h, 3*axis + batch, nil
}

// encode writes the codes [n] uint64 of the n coordinates at coords to
// codes; a row outside ext is an error naming it. Worker only.
func (d *Device) encode(op string, coords devPtr, n int64, ext grid.Extent, bits, hilbert int32, codes devPtr) error {
	if n == 0 {
		return nil
	}
	st, err := d.statusOf(func(status devPtr) error {
		g, b := d.elementwise(n)
		return d.launch("ser_encode", g, b, 0, coords, n, extOf(ext), bits, hilbert, codes, status)
	})
	if err != nil {
		return err
	}
	if st[stFlags]&flagRange != 0 {
		r := int64(st[stBadRow])
		c, err := download[int32](d, coords+devPtr(16*r), 4)
		if err != nil {
			return err
		}
		return &coordError{
			msg:   fmt.Sprintf("cudaext: %s: row %d (%d, %d, %d, %d) is outside %v", op, r, c[0], c[1], c[2], c[3], ext),
			kinds: []error{serialize.ErrOutOfRange, sparse.ErrOutOfRange},
		}
	}
	return nil
}

// decode writes the [n, 4] coordinates of the n codes at codes; a code
// that is no site of ext is an error naming it. Worker only.
func (d *Device) decode(op string, codes devPtr, n int64, ext grid.Extent, mode serialize.Mode, bits, hilbert int32, coords devPtr) error {
	if n == 0 {
		return nil
	}
	st, err := d.statusOf(func(status devPtr) error {
		g, b := d.elementwise(n)
		return d.launch("ser_decode", g, b, 0, codes, n, extOf(ext), bits, hilbert, coords, status)
	})
	if err != nil {
		return err
	}
	if st[stFlags]&flagRange != 0 {
		i := int64(st[stBadRow])
		c, err := download[uint64](d, codes+devPtr(8*i), 1)
		if err != nil {
			return err
		}
		return &coordError{
			msg:   fmt.Sprintf("cudaext: %s: code %d (%#x) at index %d is not a site of %v in %v order", op, c[0], c[0], i, ext, mode),
			kinds: []error{serialize.ErrOutOfRange, sparse.ErrOutOfRange},
		}
	}
	return nil
}

// EncodeCoords returns the serialisation codes of coords ([N, 4] Int32,
// device or host) in ext as a device [N, 2] Int32 matrix of uint64 words
// (see the notes above), equal to serialize.Encode's. A row outside ext is
// an error naming it (sparse.ErrOutOfRange, serialize.ErrOutOfRange); an
// extent whose codes need more than 64 bits fails with
// serialize.ErrTooLarge.
func (e *Engine) EncodeCoords(coords sparse.Matrix, ext grid.Extent, mode serialize.Mode) (sparse.Matrix, error) {
	const op = "EncodeCoords"
	bits, h, _, err := codeArgs(op, mode, ext)
	if err != nil {
		return sparse.Matrix{}, err
	}
	var out *Buffer
	err = e.d.do(func() error {
		c, err := e.coordsOn(op, coords)
		if err != nil {
			return err
		}
		defer c.release(e.d)
		if out, err = e.d.newBuffer(sparse.Int32, 2*c.n); err != nil {
			return err
		}
		return e.d.encode(op, c.ptr, int64(c.n), ext, bits, h, out.ptr)
	})
	if err != nil {
		out.Free()
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: out.n / 2, Cols: 2, Data: out}, nil
}

// DecodeCoords is the inverse of EncodeCoords: it returns the device
// [N, 4] Int32 coordinates of codes ([N, 2] Int32 words, device or host).
// A code that is no site of ext is an error naming it.
func (e *Engine) DecodeCoords(codes sparse.Matrix, ext grid.Extent, mode serialize.Mode) (sparse.Matrix, error) {
	const op = "DecodeCoords"
	bits, h, _, err := codeArgs(op, mode, ext)
	if err != nil {
		return sparse.Matrix{}, err
	}
	var out *Buffer
	err = e.d.do(func() error {
		c, err := e.codesOn(op, codes)
		if err != nil {
			return err
		}
		defer c.release(e.d)
		if out, err = e.d.newBuffer(sparse.Int32, 4*c.n); err != nil {
			return err
		}
		return e.d.decode(op, c.ptr, int64(c.n), ext, mode, bits, h, out.ptr)
	})
	if err != nil {
		out.Free()
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: out.n / 4, Cols: 4, Data: out}, nil
}

// SortCoords returns coords ([N, 4] Int32, device or host) reordered along
// the curve of mode, and the permutation [N, 1] Int32: sorted row j is
// coords row perm[j]. The sort is stable (equal codes, which only
// duplicates have, keep their order), as sparse.SortBy's; both results are
// on the device. Apply perm to features with GatherRows.
func (e *Engine) SortCoords(coords sparse.Matrix, ext grid.Extent, mode serialize.Mode) (sorted, perm sparse.Matrix, err error) {
	const op = "SortCoords"
	bits, h, nbits, err := codeArgs(op, mode, ext)
	if err != nil {
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	var out, pb *Buffer
	err = e.d.do(func() error {
		d := e.d
		c, err := e.coordsOn(op, coords)
		if err != nil {
			return err
		}
		defer c.release(d)
		n := int64(c.n)
		if n > math.MaxInt32 {
			return fmt.Errorf("%w: cudaext: %s: %d rows exceed 32-bit row indices", sparse.ErrIndexOverflow, op, n)
		}
		if out, err = d.newBuffer(sparse.Int32, 4*c.n); err != nil {
			return err
		}
		if pb, err = d.newBuffer(sparse.Int32, c.n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		codes, err := d.allocTemp(8 * n)
		if err != nil {
			return err
		}
		defer d.freeTemp(codes)
		if err := d.encode(op, c.ptr, n, ext, bits, h, codes.ptr); err != nil {
			return err
		}
		if err := d.radixSort(codes.ptr, pb.ptr, n, true, nbits, true); err != nil {
			return err
		}
		return d.decode(op, codes.ptr, n, ext, mode, bits, h, out.ptr)
	})
	if err != nil {
		out.Free()
		pb.Free()
		return sparse.Matrix{}, sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: pb.n, Cols: 4, Data: out}, sparse.Matrix{Rows: pb.n, Cols: 1, Data: pb}, nil
}

// codesOn returns a [N, 2] Int32 code matrix (device, or host []int32) as
// a device array of N uint64. Worker only.
func (e *Engine) codesOn(op string, m sparse.Matrix) (deviceCoords, error) {
	return e.int32RowsOn(op, "codes", 2, m)
}

// CodesToHost downloads a device code matrix ([N, 2] Int32 words) as
// []uint64.
func (e *Engine) CodesToHost(codes sparse.Matrix) ([]uint64, error) {
	b, err := e.buffer(codes, "codes")
	if err != nil {
		return nil, err
	}
	if b.dtype != sparse.Int32 || codes.Cols != 2 {
		return nil, fmt.Errorf("%w: cudaext: CodesToHost: codes are %v %s, want Int32 [N, 2]", sparse.ErrShape, b.dtype, codes.Shape())
	}
	var out []uint64
	err = e.d.do(func() (err error) {
		out, err = download[uint64](e.d, b.ptr, codes.Rows)
		return err
	})
	return out, err
}

// CodesToDevice uploads codes as a device [N, 2] Int32 matrix of uint64
// words.
func (e *Engine) CodesToDevice(codes []uint64) (sparse.Matrix, error) {
	var b *Buffer
	err := e.d.do(func() (err error) {
		if b, err = e.d.newBuffer(sparse.Int32, 2*len(codes)); err != nil {
			return err
		}
		return uploadTo(e.d, b.ptr, codes)
	})
	if err != nil {
		b.Free()
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: len(codes), Cols: 2, Data: b}, nil
}

// GatherRows returns the device matrix whose row j is row perm[j] of m
// (device, any dtype): the features of SortCoords' order. perm is [R, 1]
// Int32 (device or host) with entries in [0, m.Rows); an entry outside is
// an error naming it (sparse.ErrOutOfRange).
func (e *Engine) GatherRows(m, perm sparse.Matrix) (sparse.Matrix, error) {
	const op = "GatherRows"
	b, err := e.buffer(m, "m")
	if err != nil {
		return sparse.Matrix{}, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if perm.Cols != 1 {
		return sparse.Matrix{}, fmt.Errorf("%w: cudaext: %s: perm is %s, want [R, 1]", sparse.ErrShape, op, perm.Shape())
	}
	var out *Buffer
	err = e.d.do(func() error {
		d := e.d
		p, err := e.indexOn(op, perm)
		if err != nil {
			return err
		}
		defer p.release(d)
		if out, err = d.newBuffer(b.dtype, p.n*m.Cols); err != nil {
			return err
		}
		if p.n == 0 || m.Cols == 0 {
			return nil
		}
		if err := d.checkRows(op, p.ptr, int64(p.n), int64(m.Rows)); err != nil {
			return err
		}
		name := "spconv_im2col_b32"
		switch b.dtype.Size() {
		case 2:
			name = "spconv_im2col_b16"
		case 8:
			return fmt.Errorf("%w: cudaext: %s of %v", sparse.ErrDType, op, b.dtype)
		}
		total := int64(p.n) * int64(m.Cols)
		g, blk := d.elementwise(total)
		return d.launch(name, g, blk, 0, d.addr(b.ptr), p.ptr, out.ptr, int64(p.n), int64(1), int64(m.Cols))
	})
	if err != nil {
		out.Free()
		return sparse.Matrix{}, err
	}
	return sparse.Matrix{Rows: perm.Rows, Cols: m.Cols, Data: out}, nil
}

// checkRows reports the first of the n indices at idx outside [0, limit).
// Worker only.
func (d *Device) checkRows(op string, idx devPtr, n, limit int64) error {
	st, err := d.statusOf(func(status devPtr) error {
		g, b := d.elementwise(n)
		return d.launch("ser_check_rows", g, b, 0, idx, n, limit, status)
	})
	if err != nil {
		return err
	}
	if st[stFlags]&flagRange != 0 {
		i := int64(st[stBadRow])
		v, err := download[int32](d, idx+devPtr(4*i), 1)
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: cudaext: %s: index %d is %d, outside [0, %d)", sparse.ErrOutOfRange, op, i, v[0], limit)
	}
	return nil
}

// indexOn returns an [R, 1] Int32 matrix (device, or host []int32) as a
// device array of R int32. Worker only.
func (e *Engine) indexOn(op string, m sparse.Matrix) (deviceCoords, error) {
	if h, ok := m.Data.([]int32); ok {
		if m.Rows < 0 || len(h) != m.Rows*m.Cols {
			return deviceCoords{}, fmt.Errorf("%w: cudaext: %s: %s index matrix with %d elements", sparse.ErrShape, op, m.Shape(), len(h))
		}
		if len(h) == 0 {
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
		return deviceCoords{ptr: tmp.ptr, n: len(h), tmp: tmp}, nil
	}
	b, err := e.buffer(m, "index")
	if err != nil {
		return deviceCoords{}, fmt.Errorf("cudaext: %s: %w", op, err)
	}
	if b.dtype != sparse.Int32 {
		return deviceCoords{}, fmt.Errorf("%w: cudaext: %s: index matrix is %v, want Int32", sparse.ErrDType, op, b.dtype)
	}
	return deviceCoords{ptr: e.d.addr(b.ptr), n: b.n}, nil
}
