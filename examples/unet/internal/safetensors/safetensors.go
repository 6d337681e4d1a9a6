// Package safetensors reads and writes the safetensors file format, the
// weight format of the Hugging Face ecosystem, so that a checkpoint written
// in Go opens with Python's safetensors.numpy.load_file or
// safetensors.torch.load_file, and the other way round.
//
// A file is
//
//	8 bytes    little-endian uint64 n, the length of the header
//	n bytes    JSON object {name: {"dtype", "shape", "data_offsets": [begin, end]}, …}
//	           plus an optional "__metadata__": {string: string}; padded
//	           with spaces to a multiple of 8 bytes
//	rest       the tensors' raw little-endian bytes; data_offsets are
//	           relative to the start of this section
//
// The reader is strict: it rejects a short file, a header that is not a
// JSON object or that repeats a name, unknown fields, unknown dtypes,
// negative dimensions, a byte range that does not match its shape, ranges
// that overlap or leave holes, and bytes after the last tensor. Every error
// wraps ErrFormat.
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"unicode/utf8"
)

// ErrFormat reports a malformed or unsupported safetensors file.
var ErrFormat = errors.New("safetensors: invalid file")

// maxHeader bounds the JSON header (the reference implementation allows
// 100 MB).
const maxHeader = 100 << 20

// DType names an element type as the format spells it.
type DType string

// The element types this package reads and writes.
const (
	F32 DType = "F32"
	F64 DType = "F64"
	I32 DType = "I32"
	I64 DType = "I64"
)

// Size returns the size of one element in bytes, or 0 for an unknown type.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case F64, I64:
		return 8
	}
	return 0
}

// Tensor is one named array. Data is []float32, []float64, []int32 or
// []int64 matching DType, with as many elements as the shape says.
type Tensor struct {
	Name  string
	DType DType
	Shape []int
	Data  any
}

// NewTensor makes a tensor from a typed slice, inferring the dtype.
func NewTensor(name string, shape []int, data any) (Tensor, error) {
	t := Tensor{Name: name, Shape: slices.Clone(shape), Data: data}
	switch data.(type) {
	case []float32:
		t.DType = F32
	case []float64:
		t.DType = F64
	case []int32:
		t.DType = I32
	case []int64:
		t.DType = I64
	default:
		return Tensor{}, fmt.Errorf("%w: tensor %q: unsupported data %T", ErrFormat, name, data)
	}
	return t, t.validate()
}

// Len returns the number of elements of the shape, or −1 on overflow or a
// negative dimension.
func (t Tensor) Len() int {
	n := 1
	for _, d := range t.Shape {
		if d < 0 || (d > 0 && n > math.MaxInt/d) {
			return -1
		}
		n *= d
	}
	return n
}

func dataLen(d any) int {
	switch v := d.(type) {
	case []float32:
		return len(v)
	case []float64:
		return len(v)
	case []int32:
		return len(v)
	case []int64:
		return len(v)
	}
	return -1
}

func (t Tensor) validate() error {
	if t.Name == "" || t.Name == "__metadata__" {
		return fmt.Errorf("%w: tensor name %q is reserved or empty", ErrFormat, t.Name)
	}
	if !utf8.ValidString(t.Name) {
		return fmt.Errorf("%w: tensor name %q is not UTF-8", ErrFormat, t.Name)
	}
	if t.DType.Size() == 0 {
		return fmt.Errorf("%w: tensor %q: unsupported dtype %q", ErrFormat, t.Name, t.DType)
	}
	n := t.Len()
	if n < 0 || n > math.MaxInt/8 {
		return fmt.Errorf("%w: tensor %q: bad shape %v", ErrFormat, t.Name, t.Shape)
	}
	if got := dataLen(t.Data); got != n {
		return fmt.Errorf("%w: tensor %q: shape %v needs %d elements, data has %d (%T)", ErrFormat, t.Name, t.Shape, n, got, t.Data)
	}
	want := map[DType]string{F32: "[]float32", F64: "[]float64", I32: "[]int32", I64: "[]int64"}[t.DType]
	if fmt.Sprintf("%T", t.Data) != want {
		return fmt.Errorf("%w: tensor %q: dtype %s needs %s data, got %T", ErrFormat, t.Name, t.DType, want, t.Data)
	}
	return nil
}

// File is the content of a safetensors file.
type File struct {
	// Tensors in the order of their data in the file.
	Tensors []Tensor
	// Metadata is the free-form "__metadata__" string map (may be nil).
	Metadata map[string]string
}

// Get returns the tensor called name.
func (f *File) Get(name string) (Tensor, bool) {
	for _, t := range f.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return Tensor{}, false
}

// Encode returns the bytes of a file holding tensors, in the given order,
// and metadata. Names must be unique.
func Encode(tensors []Tensor, metadata map[string]string) ([]byte, error) {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			hdr.WriteByte(',')
		}
		first = false
	}
	if len(metadata) > 0 {
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		sep()
		hdr.WriteString(`"__metadata__":{`)
		for i, k := range keys {
			if i > 0 {
				hdr.WriteByte(',')
			}
			writeJSON(&hdr, k)
			hdr.WriteByte(':')
			writeJSON(&hdr, metadata[k])
		}
		hdr.WriteByte('}')
	}
	seen := make(map[string]bool, len(tensors))
	off := 0
	for _, t := range tensors {
		if err := t.validate(); err != nil {
			return nil, err
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("%w: tensor name %q repeated", ErrFormat, t.Name)
		}
		seen[t.Name] = true
		size := t.Len() * t.DType.Size()
		sep()
		writeJSON(&hdr, t.Name)
		fmt.Fprintf(&hdr, `:{"dtype":%q,"shape":[`, string(t.DType))
		for i, d := range t.Shape {
			if i > 0 {
				hdr.WriteByte(',')
			}
			fmt.Fprint(&hdr, d)
		}
		fmt.Fprintf(&hdr, `],"data_offsets":[%d,%d]}`, off, off+size)
		off += size
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}
	out := make([]byte, 8, 8+hdr.Len()+off)
	binary.LittleEndian.PutUint64(out, uint64(hdr.Len()))
	out = append(out, hdr.Bytes()...)
	for _, t := range tensors {
		switch d := t.Data.(type) {
		case []float32:
			for _, v := range d {
				out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
			}
		case []float64:
			for _, v := range d {
				out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
			}
		case []int32:
			for _, v := range d {
				out = binary.LittleEndian.AppendUint32(out, uint32(v))
			}
		case []int64:
			for _, v := range d {
				out = binary.LittleEndian.AppendUint64(out, uint64(v))
			}
		}
	}
	return out, nil
}

func writeJSON(b *bytes.Buffer, s string) {
	j, _ := json.Marshal(s) // a string always marshals
	b.Write(j)
}

// Save writes the file atomically: to a temporary file in the same
// directory, then renamed over path.
func Save(path string, tensors []Tensor, metadata map[string]string) error {
	b, err := Encode(tensors, metadata)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Load reads and validates the file at path.
func Load(path string) (*File, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

type entry struct {
	DType   DType   `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// Decode parses and validates the bytes of a safetensors file.
func Decode(b []byte) (*File, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: %d bytes, too short for the header length", ErrFormat, len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n < 2 || n > maxHeader || n > uint64(len(b)-8) {
		return nil, fmt.Errorf("%w: header length %d does not fit in %d bytes (limit %d)", ErrFormat, n, len(b)-8, maxHeader)
	}
	hdr, data := b[8:8+n], b[8+n:]
	if !utf8.Valid(hdr) || hdr[0] != '{' {
		return nil, fmt.Errorf("%w: header is not a UTF-8 JSON object", ErrFormat)
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("%w: header is not a JSON object", ErrFormat)
	}
	f := &File{}
	type span struct {
		begin, end int64
		i          int
	}
	var spans []span
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
		}
		name := tok.(string) // keys of an object are strings
		if seen[name] {
			return nil, fmt.Errorf("%w: header repeats %q", ErrFormat, name)
		}
		seen[name] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("%w: header entry %q: %v", ErrFormat, name, err)
		}
		if name == "__metadata__" {
			if err := strictUnmarshal(raw, &f.Metadata); err != nil {
				return nil, fmt.Errorf("%w: __metadata__ must map strings to strings: %v", ErrFormat, err)
			}
			continue
		}
		var e entry
		if err := strictUnmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %v", ErrFormat, name, err)
		}
		if name == "" {
			return nil, fmt.Errorf("%w: empty tensor name", ErrFormat)
		}
		if e.DType.Size() == 0 {
			return nil, fmt.Errorf("%w: tensor %q: unsupported dtype %q", ErrFormat, name, e.DType)
		}
		if e.Shape == nil || len(e.Offsets) != 2 {
			return nil, fmt.Errorf("%w: tensor %q: needs shape and two data_offsets", ErrFormat, name)
		}
		t := Tensor{Name: name, DType: e.DType, Shape: make([]int, len(e.Shape))}
		for i, d := range e.Shape {
			if d < 0 || d > math.MaxInt32 {
				return nil, fmt.Errorf("%w: tensor %q: dimension %d is %d", ErrFormat, name, i, d)
			}
			t.Shape[i] = int(d)
		}
		cnt := t.Len()
		begin, end := e.Offsets[0], e.Offsets[1]
		if cnt < 0 || begin < 0 || end < begin || end > int64(len(data)) {
			return nil, fmt.Errorf("%w: tensor %q: data_offsets [%d, %d] outside the %d data bytes", ErrFormat, name, begin, end, len(data))
		}
		if int64(cnt)*int64(e.DType.Size()) != end-begin {
			return nil, fmt.Errorf("%w: tensor %q: shape %v of %s needs %d bytes, data_offsets give %d", ErrFormat, name, t.Shape, t.DType, cnt*e.DType.Size(), end-begin)
		}
		t.Data = decodeData(t.DType, data[begin:end])
		spans = append(spans, span{begin, end, len(f.Tensors)})
		f.Tensors = append(f.Tensors, t)
	}
	if _, err := dec.Token(); err != nil { // closing brace
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	if rest := bytes.TrimRight(hdr[dec.InputOffset():], " "); len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d stray bytes after the header object", ErrFormat, len(rest))
	}
	slices.SortStableFunc(spans, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.begin, b.begin), cmp.Compare(a.end, b.end))
	})
	var pos int64
	ordered := make([]Tensor, 0, len(spans))
	for _, s := range spans {
		if s.begin != pos {
			return nil, fmt.Errorf("%w: tensor %q starts at byte %d, want %d (holes or overlaps)", ErrFormat, f.Tensors[s.i].Name, s.begin, pos)
		}
		pos = s.end
		ordered = append(ordered, f.Tensors[s.i])
	}
	if pos != int64(len(data)) {
		return nil, fmt.Errorf("%w: tensors cover %d of %d data bytes", ErrFormat, pos, len(data))
	}
	f.Tensors = ordered
	return f, nil
}

func strictUnmarshal(raw []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data")
	}
	return nil
}

func decodeData(dt DType, b []byte) any {
	switch dt {
	case F32:
		out := make([]float32, len(b)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out
	case F64:
		out := make([]float64, len(b)/8)
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return out
	case I32:
		out := make([]int32, len(b)/4)
		for i := range out {
			out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return out
	case I64:
		out := make([]int64, len(b)/8)
		for i := range out {
			out[i] = int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return out
	}
	return nil
}
