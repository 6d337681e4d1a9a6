package sparse

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrNpy reports malformed or unsupported .npy data: a bad magic string,
// version or header, an unsupported dtype, an unexpected shape, or
// truncated data.
var ErrNpy = errors.New("sparse: bad .npy data")

// File names used by SaveTensor and LoadTensor inside a tensor directory.
const (
	// CoordsFile holds the [N, 4] int32 coordinates.
	CoordsFile = "coords.npy"
	// FeatsFile holds the [N, C] float32 or float64 features.
	FeatsFile = "feats.npy"
	// ExtentFile holds the extent as an int64 array [Batch, X, Y, Z].
	ExtentFile = "extent.npy"
)

// The .npy format (numpy.lib.format): the magic "\x93NUMPY", a major and
// minor version byte, the header length (uint16 in version 1, uint32 in
// versions 2 and 3, little-endian), and a header that is a Python dict
// literal with the keys 'descr', 'fortran_order' and 'shape', padded with
// spaces and a final newline so that the data starts at a multiple of 64
// bytes. The data follows as raw elements in C (row-major) or Fortran
// (column-major) order.
const (
	npyMagic        = "\x93NUMPY"
	npyAlign        = 64
	npyMaxHeaderLen = 1 << 20 // numpy itself refuses headers above 10 000 bytes by default
	npyChunk        = 1 << 20 // bytes read or written per step
	// npyPrealloc caps the elements allocated up front from a header's
	// shape; beyond it the slice grows as data actually arrives, so a
	// header that claims a huge shape cannot allocate without the data.
	npyPrealloc = 1 << 24
)

// npyHeader is a parsed .npy header of a simple (non-structured) dtype.
type npyHeader struct {
	descr   string
	kind    byte // 'i', 'u', 'f', 'c', 'b', …
	size    int  // bytes per element
	order   binary.ByteOrder
	fortran bool
	shape   []int
	count   int // number of elements
}

// WriteCoordsNpy writes coords (flat [N, 4]) as an int32 [N, 4] .npy
// array, as numpy.save would (version 1.0, little-endian '<i4', C order).
func WriteCoordsNpy(w io.Writer, coords []int32) error {
	if len(coords)%4 != 0 {
		return fmt.Errorf("%w: coordinate array of length %d is not [N, 4]", ErrShape, len(coords))
	}
	return writeNpy(w, "<i4", []int{len(coords) / 4, 4}, len(coords), func(dst []byte, i int) {
		binary.LittleEndian.PutUint32(dst, uint32(coords[i]))
	})
}

// ReadCoordsNpy reads an [N, 4] .npy array of int32 or int64 (either byte
// order, C or Fortran order) and returns it as flat [N, 4] int32 rows. It
// reads exactly one array, so several arrays saved one after another into
// one stream can be read in turn. Other dtypes, shapes other than [N, 4],
// int64 values outside int32 and malformed data fail with ErrNpy.
func ReadCoordsNpy(r io.Reader) ([]int32, error) {
	h, err := readNpyHeader(r)
	if err != nil {
		return nil, err
	}
	if h.kind != 'i' || (h.size != 4 && h.size != 8) {
		return nil, fmt.Errorf("%w: coordinates must be int32 or int64, got dtype %q%s", ErrNpy, h.descr, dtypeHint(h, "int32"))
	}
	if len(h.shape) != 2 || h.shape[1] != 4 {
		return nil, fmt.Errorf("%w: coordinates must have shape (N, 4), got %s", ErrNpy, shapeString(h.shape))
	}
	out := make([]int32, 0, min(h.count, npyPrealloc))
	var bad error
	err = readNpyData(r, h, func(chunk []byte) {
		k := len(chunk) / h.size
		base := len(out)
		out = slices.Grow(out, k)[:base+k]
		dst := out[base:]
		if h.size == 4 {
			for i := range dst {
				dst[i] = int32(h.order.Uint32(chunk[4*i:]))
			}
			return
		}
		for i := range dst {
			v := int64(h.order.Uint64(chunk[8*i:]))
			if (v < math.MinInt32 || v > math.MaxInt32) && bad == nil {
				bad = fmt.Errorf("%w: int64 coordinate %d (element %d) does not fit in int32", ErrNpy, v, base+i)
			}
			dst[i] = int32(v)
		}
	})
	if err != nil {
		return nil, err
	}
	if bad != nil {
		return nil, bad
	}
	if h.fortran {
		out = fromFortran(out, h.shape[0], 4)
	}
	return out, nil
}

// WriteFeatsNpy writes a host float32 or float64 Matrix as a [Rows, Cols]
// .npy array ('<f4' or '<f8', version 1.0, C order).
func WriteFeatsNpy(w io.Writer, feats Matrix) error {
	if err := feats.Validate(); err != nil {
		return err
	}
	shape := []int{feats.Rows, feats.Cols}
	switch d := feats.Data.(type) {
	case []float32:
		return writeNpy(w, "<f4", shape, len(d), func(dst []byte, i int) {
			binary.LittleEndian.PutUint32(dst, math.Float32bits(d[i]))
		})
	case []float64:
		return writeNpy(w, "<f8", shape, len(d), func(dst []byte, i int) {
			binary.LittleEndian.PutUint64(dst, math.Float64bits(d[i]))
		})
	}
	return fmt.Errorf("%w: WriteFeatsNpy writes host float32 or float64 features, got %T", ErrDType, feats.Data)
}

// ReadFeatsNpy reads a float32 or float64 .npy array of shape (N, C), or
// (N,) read as [N, 1], in either byte order and C or Fortran order, and
// returns it as a host Matrix of the same element type. Other dtypes and
// shapes and malformed data fail with ErrNpy.
func ReadFeatsNpy(r io.Reader) (Matrix, error) {
	h, err := readNpyHeader(r)
	if err != nil {
		return Matrix{}, err
	}
	if h.kind != 'f' || (h.size != 4 && h.size != 8) {
		return Matrix{}, fmt.Errorf("%w: features must be float32 or float64, got dtype %q%s", ErrNpy, h.descr, dtypeHint(h, "float32"))
	}
	var rows, cols int
	switch len(h.shape) {
	case 1:
		rows, cols = h.shape[0], 1
	case 2:
		rows, cols = h.shape[0], h.shape[1]
	default:
		return Matrix{}, fmt.Errorf("%w: features must have shape (N, C) or (N,), got %s", ErrNpy, shapeString(h.shape))
	}
	if h.size == 4 {
		out := make([]float32, 0, min(h.count, npyPrealloc))
		err = readNpyData(r, h, func(chunk []byte) {
			base := len(out)
			out = slices.Grow(out, len(chunk)/4)[:base+len(chunk)/4]
			for i := range out[base:] {
				out[base+i] = math.Float32frombits(h.order.Uint32(chunk[4*i:]))
			}
		})
		if err != nil {
			return Matrix{}, err
		}
		if h.fortran {
			out = fromFortran(out, rows, cols)
		}
		return Matrix{Rows: rows, Cols: cols, Data: out}, nil
	}
	out := make([]float64, 0, min(h.count, npyPrealloc))
	err = readNpyData(r, h, func(chunk []byte) {
		base := len(out)
		out = slices.Grow(out, len(chunk)/8)[:base+len(chunk)/8]
		for i := range out[base:] {
			out[base+i] = math.Float64frombits(h.order.Uint64(chunk[8*i:]))
		}
	})
	if err != nil {
		return Matrix{}, err
	}
	if h.fortran {
		out = fromFortran(out, rows, cols)
	}
	return Matrix{Rows: rows, Cols: cols, Data: out}, nil
}

// SaveTensor writes t into directory dir (created if needed) as three .npy
// files: CoordsFile ([N, 4] int32), FeatsFile ([N, C] float32 or float64)
// and ExtentFile (int64 [Batch, X, Y, Z]). In numpy:
//
//	coords = np.load(dir + "/coords.npy"); feats = np.load(dir + "/feats.npy")
//
// Each file is written to a temporary name and renamed into place. t must
// be a valid tensor (see NewTensor) with host float32 or float64 features.
func SaveTensor(dir string, t *Tensor) error {
	if t == nil {
		return fmt.Errorf("%w: SaveTensor of a nil tensor", ErrShape)
	}
	if _, err := NewTensor(t.Coords, t.Feats, t.Extent); err != nil {
		return err
	}
	switch t.Feats.Data.(type) {
	case []float32, []float64:
	default:
		return fmt.Errorf("%w: SaveTensor writes host float32 or float64 features, got %T", ErrDType, t.Feats.Data)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sparse: SaveTensor: %w", err)
	}
	ext := []int64{int64(t.Extent.Batch), int64(t.Extent.X), int64(t.Extent.Y), int64(t.Extent.Z)}
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{
		{CoordsFile, func(w io.Writer) error { return WriteCoordsNpy(w, t.Coords) }},
		{FeatsFile, func(w io.Writer) error { return WriteFeatsNpy(w, t.Feats) }},
		{ExtentFile, func(w io.Writer) error {
			return writeNpy(w, "<i8", []int{4}, 4, func(dst []byte, i int) {
				binary.LittleEndian.PutUint64(dst, uint64(ext[i]))
			})
		}},
	} {
		if err := writeFileAtomic(filepath.Join(dir, f.name), f.write); err != nil {
			return fmt.Errorf("sparse: SaveTensor: %w", err)
		}
	}
	return nil
}

// LoadTensor reads a tensor from directory dir: CoordsFile and FeatsFile
// are required, ExtentFile is optional (without it the extent is the
// smallest one from 0 that covers the coordinates). The result is checked
// as NewTensor does (range, duplicates, matching row counts).
func LoadTensor(dir string) (*Tensor, error) {
	var coords []int32
	var feats Matrix
	err := readFile(filepath.Join(dir, CoordsFile), func(r io.Reader) (err error) {
		coords, err = ReadCoordsNpy(r)
		return err
	})
	if err != nil {
		return nil, err
	}
	err = readFile(filepath.Join(dir, FeatsFile), func(r io.Reader) (err error) {
		feats, err = ReadFeatsNpy(r)
		return err
	})
	if err != nil {
		return nil, err
	}
	ext, err := loadExtent(filepath.Join(dir, ExtentFile), coords)
	if err != nil {
		return nil, err
	}
	return NewTensor(coords, feats, ext)
}

func loadExtent(path string, coords []int32) (Extent, error) {
	var dims []int64
	err := readFile(path, func(r io.Reader) error {
		h, err := readNpyHeader(r)
		if err != nil {
			return err
		}
		if h.kind != 'i' || (h.size != 4 && h.size != 8) || len(h.shape) != 1 || h.shape[0] != 4 {
			return fmt.Errorf("%w: the extent must be an int32 or int64 array of shape (4,), got dtype %q shape %s", ErrNpy, h.descr, shapeString(h.shape))
		}
		return readNpyData(r, h, func(chunk []byte) {
			for i := 0; i < len(chunk); i += h.size {
				if h.size == 4 {
					dims = append(dims, int64(int32(h.order.Uint32(chunk[i:]))))
				} else {
					dims = append(dims, int64(h.order.Uint64(chunk[i:])))
				}
			}
		})
	})
	if errors.Is(err, os.ErrNotExist) {
		return coordsExtent(coords), nil
	}
	if err != nil {
		return Extent{}, err
	}
	for _, d := range dims {
		if d <= 0 || d > math.MaxInt32+1 {
			return Extent{}, fmt.Errorf("%w: %s holds extent %v; every dimension must be in [1, 2^31]", ErrNpy, path, dims)
		}
	}
	return Extent{Batch: int(dims[0]), X: int(dims[1]), Y: int(dims[2]), Z: int(dims[3])}, nil
}

// coordsExtent returns the smallest extent from 0 that covers coords, or
// {1, 1, 1, 1} for none. Negative coordinates are left for NewTensor to
// report.
func coordsExtent(coords []int32) Extent {
	hi := [4]int{}
	for i, c := range coords {
		hi[i%4] = max(hi[i%4], int(c)+1)
	}
	return Extent{Batch: max(hi[0], 1), X: max(hi[1], 1), Y: max(hi[2], 1), Z: max(hi[3], 1)}
}

func readFile(path string, read func(io.Reader) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sparse: %w", err)
	}
	defer f.Close()
	if err := read(f); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// writeNpy writes a version 1.0 header for descr and shape (C order), then
// n elements of put(dst, i), each len(dst) = element size bytes.
func writeNpy(w io.Writer, descr string, shape []int, n int, put func(dst []byte, i int)) error {
	dict := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shapeString(shape))
	// Preamble (10 bytes) + dict + padding + "\n" is a multiple of 64.
	hlen := len(dict) + 1
	hlen += (npyAlign - (10+hlen)%npyAlign) % npyAlign
	buf := make([]byte, 0, 10+hlen)
	buf = append(buf, npyMagic...)
	buf = append(buf, 1, 0)
	buf = binary.LittleEndian.AppendUint16(buf, uint16(hlen))
	buf = append(buf, dict...)
	for len(buf) < 10+hlen-1 {
		buf = append(buf, ' ')
	}
	buf = append(buf, '\n')
	if _, err := w.Write(buf); err != nil {
		return err
	}
	size, _ := strconv.Atoi(descr[2:])
	per := npyChunk / size
	chunk := make([]byte, min(n, per)*size)
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		b := chunk[:(hi-lo)*size]
		for i := lo; i < hi; i++ {
			put(b[(i-lo)*size:], i)
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// readNpyHeader reads the preamble and header of one .npy array and leaves
// r at the first data byte.
func readNpyHeader(r io.Reader) (npyHeader, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return npyHeader{}, fmt.Errorf("%w: reading the preamble: %w", ErrNpy, err)
	}
	if string(pre[:6]) != npyMagic {
		return npyHeader{}, fmt.Errorf("%w: not a .npy file (magic %q)", ErrNpy, pre[:6])
	}
	major, minor := pre[6], pre[7]
	var hlen int
	switch major {
	case 1:
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return npyHeader{}, fmt.Errorf("%w: reading the header length: %w", ErrNpy, err)
		}
		hlen = int(binary.LittleEndian.Uint16(l[:]))
	case 2, 3:
		var l [4]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return npyHeader{}, fmt.Errorf("%w: reading the header length: %w", ErrNpy, err)
		}
		hlen = int(binary.LittleEndian.Uint32(l[:]))
	default:
		return npyHeader{}, fmt.Errorf("%w: unsupported format version %d.%d (want 1.0, 2.0 or 3.0)", ErrNpy, major, minor)
	}
	if hlen > npyMaxHeaderLen {
		return npyHeader{}, fmt.Errorf("%w: header of %d bytes is longer than %d", ErrNpy, hlen, npyMaxHeaderLen)
	}
	hdr := make([]byte, hlen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return npyHeader{}, fmt.Errorf("%w: reading a %d-byte header: %w", ErrNpy, hlen, err)
	}
	h, err := parseNpyHeader(string(hdr))
	if err != nil {
		return npyHeader{}, fmt.Errorf("%w: header %q: %w", ErrNpy, strings.TrimRight(string(hdr), " \n"), err)
	}
	return h, nil
}

// parseNpyHeader parses the header dict, a Python literal such as
// {'descr': '<i4', 'fortran_order': False, 'shape': (3, 4), }.
func parseNpyHeader(s string) (npyHeader, error) {
	var h npyHeader
	p := pyLiteral{s: s}
	if !p.eat('{') {
		return h, errors.New("the header is not a dict")
	}
	seen := map[string]bool{}
	for {
		if p.eat('}') {
			break
		}
		key, err := p.str()
		if err != nil {
			return h, fmt.Errorf("dict key: %w", err)
		}
		if seen[key] {
			return h, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		if !p.eat(':') {
			return h, fmt.Errorf("no ':' after key %q", key)
		}
		switch key {
		case "descr":
			if p.peek() == '[' {
				return h, errors.New("structured (record) dtypes are not supported")
			}
			if h.descr, err = p.str(); err != nil {
				return h, fmt.Errorf("descr: %w", err)
			}
		case "fortran_order":
			switch {
			case p.word("True"):
				h.fortran = true
			case p.word("False"):
				h.fortran = false
			default:
				return h, errors.New("fortran_order is neither True nor False")
			}
		case "shape":
			if h.shape, err = p.tuple(); err != nil {
				return h, fmt.Errorf("shape: %w", err)
			}
		default:
			return h, fmt.Errorf("unexpected key %q", key)
		}
		if !p.eat(',') {
			if !p.eat('}') {
				return h, errors.New("expected ',' or '}'")
			}
			break
		}
	}
	if rest := strings.Trim(p.s[p.i:], " \t\r\n\x00"); rest != "" {
		return h, fmt.Errorf("text %q after the dict", rest)
	}
	for _, k := range []string{"descr", "fortran_order", "shape"} {
		if !seen[k] {
			return h, fmt.Errorf("key %q is missing", k)
		}
	}
	if err := h.parseDescr(); err != nil {
		return h, err
	}
	h.count = 1
	for _, d := range h.shape {
		hi, lo := bits.Mul64(uint64(h.count), uint64(d))
		if hi != 0 || lo > math.MaxInt/uint64(h.size) {
			return h, fmt.Errorf("shape %s is too large", shapeString(h.shape))
		}
		h.count = int(lo)
	}
	return h, nil
}

// parseDescr reads a simple dtype string: a byte order ('<', '>', '|')
// then a kind letter and an element size, such as "<i4" or ">f8".
func (h *npyHeader) parseDescr() error {
	d := h.descr
	if len(d) < 3 || !strings.ContainsRune("<>|=", rune(d[0])) {
		return fmt.Errorf("dtype %q is not a simple numeric type", d)
	}
	size, err := strconv.Atoi(d[2:])
	if err != nil || size <= 0 {
		return fmt.Errorf("dtype %q is not a simple numeric type", d)
	}
	h.kind, h.size = d[1], size
	switch d[0] {
	case '<':
		h.order = binary.LittleEndian
	case '>':
		h.order = binary.BigEndian
	case '|':
		if size != 1 {
			return fmt.Errorf("dtype %q has no byte order", d)
		}
		h.order = binary.LittleEndian
	case '=':
		return fmt.Errorf("dtype %q uses the writer's native byte order, which a file cannot tell; numpy writes '<' or '>'", d)
	}
	return nil
}

// readNpyData reads the h.count·h.size data bytes of an array and hands
// them to emit in chunks of whole elements, never reading past the array.
func readNpyData(r io.Reader, h npyHeader, emit func([]byte)) error {
	total := h.count * h.size
	per := npyChunk / h.size * h.size
	buf := make([]byte, min(total, per))
	for done := 0; done < total; {
		b := buf[:min(per, total-done)]
		n, err := io.ReadFull(r, b)
		if err != nil {
			return fmt.Errorf("%w: data ends after %d of %d bytes (%d %q elements of shape %s): %w",
				ErrNpy, done+n, total, h.count, h.descr, shapeString(h.shape), io.ErrUnexpectedEOF)
		}
		emit(b)
		done += n
	}
	return nil
}

// fromFortran reorders a column-major [rows, cols] array to row-major.
func fromFortran[T any](in []T, rows, cols int) []T {
	if rows <= 1 || cols <= 1 {
		return in
	}
	out := make([]T, len(in))
	for c := range cols {
		col := in[c*rows : (c+1)*rows]
		for r, v := range col {
			out[r*cols+c] = v
		}
	}
	return out
}

// dtypeHint suggests the numpy conversion to the wanted dtype.
func dtypeHint(h npyHeader, want string) string {
	if h.kind == 'f' && h.size == 2 {
		return fmt.Sprintf(" (float16 is not supported; convert with .astype(np.%s))", want)
	}
	return fmt.Sprintf(" (convert with .astype(np.%s))", want)
}

func shapeString(shape []int) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = strconv.Itoa(d)
	}
	if len(shape) == 1 {
		return "(" + parts[0] + ",)"
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// pyLiteral scans the small subset of Python literals that .npy headers
// use: dicts, single- or double-quoted strings without escapes, True,
// False, and tuples of non-negative integers.
type pyLiteral struct {
	s string
	i int
}

func (p *pyLiteral) skip() {
	for p.i < len(p.s) && strings.IndexByte(" \t\r\n", p.s[p.i]) >= 0 {
		p.i++
	}
}

func (p *pyLiteral) peek() byte {
	p.skip()
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *pyLiteral) eat(c byte) bool {
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

func (p *pyLiteral) word(w string) bool {
	p.skip()
	if strings.HasPrefix(p.s[p.i:], w) {
		p.i += len(w)
		return true
	}
	return false
}

func (p *pyLiteral) str() (string, error) {
	q := p.peek()
	if q != '\'' && q != '"' {
		return "", errors.New("expected a quoted string")
	}
	end := strings.IndexByte(p.s[p.i+1:], q)
	if end < 0 {
		return "", errors.New("unterminated string")
	}
	v := p.s[p.i+1 : p.i+1+end]
	if strings.IndexByte(v, '\\') >= 0 {
		return "", fmt.Errorf("escapes in string %q are not supported", v)
	}
	p.i += end + 2
	return v, nil
}

func (p *pyLiteral) tuple() ([]int, error) {
	if !p.eat('(') {
		return nil, errors.New("expected a tuple")
	}
	dims := []int{}
	for {
		if p.eat(')') {
			return dims, nil
		}
		p.skip()
		start := p.i
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
		}
		d, err := strconv.ParseInt(p.s[start:p.i], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("dimension %q is not a non-negative integer", p.s[start:min(p.i+1, len(p.s))])
		}
		if p.i < len(p.s) && p.s[p.i] == 'L' { // Python 2 long
			p.i++
		}
		dims = append(dims, int(d))
		if !p.eat(',') {
			if !p.eat(')') {
				return nil, errors.New("expected ',' or ')' in the tuple")
			}
			return dims, nil
		}
	}
}
