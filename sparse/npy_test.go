package sparse

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"codeberg.org/sbinet/npyio/npy"
	"github.com/stretchr/testify/require"
)

// Values written by testdata/npy/gen.py.
var (
	npyCoords = []int32{0, 1, 2, 3, 1, 4, 5, 6, 2, 7, 8, 9}
	npyFeats  = []float64{0.5, -1.25, 3.0, 1e-3, -7.0, 2.5e10}
)

func npyFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "npy", name))
	require.NoError(t, err)
	return b
}

// handNpy builds a .npy file byte by byte from the format description: magic,
// version, little-endian header length, the header dict padded with spaces
// to a multiple of 64 bytes and ended by a newline, then data.
func handNpy(major byte, dict string, data []byte) []byte {
	pre := 10
	if major > 1 {
		pre = 12
	}
	hlen := len(dict) + 1
	for (pre+hlen)%64 != 0 {
		hlen++
	}
	out := []byte("\x93NUMPY")
	out = append(out, major, 0)
	if major == 1 {
		out = binary.LittleEndian.AppendUint16(out, uint16(hlen))
	} else {
		out = binary.LittleEndian.AppendUint32(out, uint32(hlen))
	}
	out = append(out, dict...)
	out = append(out, bytes.Repeat([]byte{' '}, hlen-len(dict)-1)...)
	out = append(out, '\n')
	return append(out, data...)
}

func le32(vals ...int32) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

func TestHandBuiltHeader(t *testing.T) {
	// Version 1.0, '<i4', shape (2, 4): what numpy.save writes for an
	// int32 array of that shape.
	raw := handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 4), }", le32(0, 1, 2, 3, 1, 5, 6, 7))
	require.Len(t, raw, 128+32)
	got, err := ReadCoordsNpy(bytes.NewReader(raw))
	require.NoError(t, err)
	require.Equal(t, []int32{0, 1, 2, 3, 1, 5, 6, 7}, got)

	// Our writer produces exactly these bytes.
	var buf bytes.Buffer
	require.NoError(t, WriteCoordsNpy(&buf, got))
	require.Equal(t, raw, buf.Bytes())

	// Fortran order: the columns one after another.
	raw = handNpy(1, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 4), }", le32(0, 1, 1, 5, 2, 6, 3, 7))
	got, err = ReadCoordsNpy(bytes.NewReader(raw))
	require.NoError(t, err)
	require.Equal(t, []int32{0, 1, 2, 3, 1, 5, 6, 7}, got)

	// Key order, quotes, spacing and trailing comma are free in Python.
	for _, dict := range []string{
		`{"shape": (2,4), "fortran_order": False, "descr": "<i4"}`,
		"{'descr':'<i4','fortran_order':False,'shape':(2L, 4L)}",
		"{ 'fortran_order' : False , 'shape' : ( 2 , 4 , ) , 'descr' : '<i4' , }",
	} {
		got, err = ReadCoordsNpy(bytes.NewReader(handNpy(2, dict, le32(0, 1, 2, 3, 1, 5, 6, 7))))
		require.NoError(t, err, dict)
		require.Equal(t, []int32{0, 1, 2, 3, 1, 5, 6, 7}, got, dict)
	}
}

func TestReadNumpyFiles(t *testing.T) {
	for _, name := range []string{"coords_i4.npy", "coords_i8_fortran.npy", "coords_i4_big_endian.npy", "coords_v2.npy", "coords_v3.npy"} {
		got, err := ReadCoordsNpy(bytes.NewReader(npyFile(t, name)))
		require.NoError(t, err, name)
		require.Equal(t, npyCoords, got, name)
	}
	got, err := ReadCoordsNpy(bytes.NewReader(npyFile(t, "coords_empty.npy")))
	require.NoError(t, err)
	require.Empty(t, got)

	f32 := make([]float32, len(npyFeats))
	for i, v := range npyFeats {
		f32[i] = float32(v)
	}
	for _, tc := range []struct {
		name       string
		rows, cols int
		want       any
	}{
		{"feats_f4.npy", 3, 2, f32},
		{"feats_f8_fortran.npy", 3, 2, npyFeats},
		{"feats_f8_big_endian.npy", 3, 2, npyFeats},
		{"feats_1d_f8.npy", 3, 1, []float64{0.5, 3.0, -7.0}},
		{"feats_empty.npy", 0, 5, []float32{}},
	} {
		m, err := ReadFeatsNpy(bytes.NewReader(npyFile(t, tc.name)))
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.rows, m.Rows, tc.name)
		require.Equal(t, tc.cols, m.Cols, tc.name)
		require.Equal(t, tc.want, m.Data, tc.name)
		require.NoError(t, m.Validate())
	}

	// Two arrays saved into one stream are read in turn.
	r := bytes.NewReader(npyFile(t, "stream.npy"))
	got, err = ReadCoordsNpy(r)
	require.NoError(t, err)
	require.Equal(t, npyCoords, got)
	m, err := ReadFeatsNpy(r)
	require.NoError(t, err)
	require.Equal(t, f32, m.F32())
	require.Zero(t, r.Len(), "nothing is left over")

	// Rejections, with the reason in the message.
	for _, tc := range []struct {
		name, msg string
		coords    bool
	}{
		{"coords_f4.npy", `coordinates must be int32 or int64, got dtype "<f4" (convert with .astype(np.int32))`, true},
		{"coords_3cols.npy", "coordinates must have shape (N, 4), got (3, 3)", true},
		{"feats_f2.npy", "float16 is not supported", false},
		{"coords_i4.npy", `features must be float32 or float64, got dtype "<i4"`, false},
		{"feats_1d_f8.npy", "coordinates must be int32 or int64", true},
	} {
		var err error
		if tc.coords {
			_, err = ReadCoordsNpy(bytes.NewReader(npyFile(t, tc.name)))
		} else {
			_, err = ReadFeatsNpy(bytes.NewReader(npyFile(t, tc.name)))
		}
		require.ErrorIs(t, err, ErrNpy, tc.name)
		require.ErrorContains(t, err, tc.msg, tc.name)
	}
}

func TestWriteMatchesNumpyBytes(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, WriteCoordsNpy(&buf, npyCoords))
	require.Equal(t, npyFile(t, "coords_i4.npy"), buf.Bytes(), "byte-identical to numpy.save")
	buf.Reset()
	require.NoError(t, WriteCoordsNpy(&buf, []int32{}))
	require.Equal(t, npyFile(t, "coords_empty.npy"), buf.Bytes())
	buf.Reset()
	f32 := make([]float32, len(npyFeats))
	for i, v := range npyFeats {
		f32[i] = float32(v)
	}
	require.NoError(t, WriteFeatsNpy(&buf, Matrix{Rows: 3, Cols: 2, Data: f32}))
	require.Equal(t, npyFile(t, "feats_f4.npy"), buf.Bytes())
	buf.Reset()
	require.NoError(t, WriteFeatsNpy(&buf, Matrix{Rows: 0, Cols: 5, Data: []float32{}}))
	require.Equal(t, npyFile(t, "feats_empty.npy"), buf.Bytes())
}

func TestNpyRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 300000} { // the last spans several 1 MiB chunks
		coords := make([]int32, 4*n)
		for i := range coords {
			coords[i] = int32(rng.Uint32())
		}
		var buf bytes.Buffer
		require.NoError(t, WriteCoordsNpy(&buf, coords))
		require.Zero(t, (buf.Len()-16*n)%64, "the data starts at a multiple of 64 bytes")
		got, err := ReadCoordsNpy(&buf)
		require.NoError(t, err)
		require.Equal(t, coords, got)

		for _, c := range []int{0, 1, 5} {
			f32 := make([]float32, n*c)
			f64 := make([]float64, n*c)
			for i := range f32 {
				f32[i] = float32(rng.NormFloat64())
				f64[i] = rng.NormFloat64()
			}
			if len(f64) > 3 {
				f64[0], f64[1], f64[2] = math.Inf(-1), math.NaN(), math.SmallestNonzeroFloat64
			}
			for _, m := range []Matrix{{Rows: n, Cols: c, Data: f32}, {Rows: n, Cols: c, Data: f64}} {
				buf.Reset()
				require.NoError(t, WriteFeatsNpy(&buf, m))
				got, err := ReadFeatsNpy(&buf)
				require.NoError(t, err)
				require.Equal(t, m.Rows, got.Rows)
				require.Equal(t, m.Cols, got.Cols)
				switch d := m.Data.(type) {
				case []float32:
					require.Equal(t, d, got.F32())
				case []float64:
					g := got.F64()
					require.Len(t, g, len(d))
					for i := range d {
						require.Equal(t, math.Float64bits(d[i]), math.Float64bits(g[i]), "bit-exact, NaN included")
					}
				}
			}
		}
	}
	require.ErrorIs(t, WriteCoordsNpy(io.Discard, []int32{1, 2, 3}), ErrShape)
	require.ErrorIs(t, WriteFeatsNpy(io.Discard, Matrix{Rows: 1, Cols: 1, Data: []int32{1}}), ErrDType)
	require.ErrorIs(t, WriteFeatsNpy(io.Discard, Matrix{Rows: 2, Cols: 1, Data: []float32{1}}), ErrShape)
	require.Error(t, WriteFeatsNpy(io.Discard, Matrix{}))
}

func TestNpyioInterop(t *testing.T) {
	// npyio, an independent Go implementation, reads what we write...
	var buf bytes.Buffer
	require.NoError(t, WriteCoordsNpy(&buf, npyCoords))
	r, err := npy.NewReader(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, []int{3, 4}, r.Header.Descr.Shape)
	require.Equal(t, "'<i4'", r.Header.Descr.Type)
	require.False(t, r.Header.Descr.Fortran)
	var ints []int32
	require.NoError(t, r.Read(&ints))
	require.Equal(t, npyCoords, ints)

	buf.Reset()
	require.NoError(t, WriteFeatsNpy(&buf, Matrix{Rows: 3, Cols: 2, Data: npyFeats}))
	var floats []float64
	require.NoError(t, npy.Read(bytes.NewReader(buf.Bytes()), &floats))
	require.Equal(t, npyFeats, floats)

	// ... and we read what it writes (version 2.0 headers, its own padding).
	buf.Reset()
	require.NoError(t, npy.Write(&buf, [][4]int32{{0, 1, 2, 3}, {1, 4, 5, 6}, {2, 7, 8, 9}}))
	got, err := ReadCoordsNpy(&buf)
	require.NoError(t, err)
	require.Equal(t, npyCoords, got)
	buf.Reset()
	require.NoError(t, npy.Write(&buf, [][2]float64{{0.5, -1.25}, {3.0, 1e-3}, {-7.0, 2.5e10}}))
	m, err := ReadFeatsNpy(&buf)
	require.NoError(t, err)
	require.Equal(t, npyFeats, m.F64())
}

func TestReadNpyErrors(t *testing.T) {
	good := "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 4), }"
	data := le32(0, 1, 2, 3, 1, 5, 6, 7)
	for i, tc := range []struct {
		raw []byte
		msg string
	}{
		{raw: nil, msg: "reading the preamble"},
		{raw: []byte("\x93NUMP"), msg: "reading the preamble"},
		{raw: []byte("PK\x03\x04....xxxxxxxx"), msg: "not a .npy file"},
		{raw: handNpy(1, good, data)[:9], msg: "header length"},
		{raw: append([]byte("\x93NUMPY\x04\x00"), 0, 0, 0, 0), msg: "unsupported format version 4.0"},
		{raw: append([]byte("\x93NUMPY\x02\x00"), 0xff, 0xff, 0xff, 0x7f), msg: "longer than"},
		{raw: handNpy(1, good, data)[:100], msg: "reading a 118-byte header"},
		{raw: handNpy(1, good, data[:31]), msg: "data ends after 31 of 32 bytes"},
		{raw: handNpy(1, good, nil), msg: "data ends after 0 of 32 bytes"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False}", data), msg: `key "shape" is missing`},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 4), 'extra': 1}", data), msg: `unexpected key "extra"`},
		{raw: handNpy(1, "{'descr': '<i4', 'descr': '<i4', 'fortran_order': False, 'shape': (2, 4)}", data), msg: "appears twice"},
		{raw: handNpy(1, "{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,)}", data), msg: "structured"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': 0, 'shape': (2, 4)}", data), msg: "neither True nor False"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, -4)}", data), msg: "not a non-negative integer"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': [2, 4]}", data), msg: "expected a tuple"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2 4)}", data), msg: "expected ',' or ')'"},
		{raw: handNpy(1, "{'descr': '<i4' 'fortran_order': False, 'shape': (2, 4)}", data), msg: "expected ',' or '}'"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 4)} junk", data), msg: "after the dict"},
		{raw: handNpy(1, "('descr', '<i4')", data), msg: "not a dict"},
		{raw: handNpy(1, "{'descr: '<i4'}", data), msg: "no ':'"},
		{raw: handNpy(1, "{descr: '<i4'}", data), msg: "expected a quoted string"},
		{raw: handNpy(1, "{'descr': 'i4', 'fortran_order': False, 'shape': (2, 4)}", data), msg: "not a simple numeric type"},
		{raw: handNpy(1, "{'descr': '=i4', 'fortran_order': False, 'shape': (2, 4)}", data), msg: "native byte order"},
		{raw: handNpy(1, "{'descr': '|i4', 'fortran_order': False, 'shape': (2, 4)}", data), msg: "no byte order"},
		{raw: handNpy(1, "{'descr': '<i\\x34', 'fortran_order': False, 'shape': (2, 4)}", data), msg: "escapes"},
		{raw: handNpy(1, "{'descr': '<i4, 'fortran_order': False, 'shape': (2, 4)}", data), msg: "expected ',' or '}'"},
		{raw: handNpy(1, "{'descr': '<u4', 'fortran_order': False, 'shape': (2, 4)}", data), msg: "must be int32 or int64"},
		{raw: handNpy(1, "{'descr': '<i2', 'fortran_order': False, 'shape': (4, 4)}", data), msg: "must be int32 or int64"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (8,)}", data), msg: "shape (N, 4), got (8,)"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': ()}", data), msg: "shape (N, 4), got ()"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 2, 4)}", data), msg: "got (1, 2, 4)"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387904, 4)}", data), msg: "too large"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (99999999999999999999, 4)}", data), msg: "not a non-negative integer"},
		{raw: handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (100000000000, 4)}", data), msg: "data ends after 32 of 1600000000000 bytes"},
		{raw: handNpy(1, "{'descr': '<i8', 'fortran_order': False, 'shape': (1, 4)}", append(le32(0, 0, 0, 0, 0, 0), 0, 0, 0, 0, 1, 0, 0, 0)), msg: "int64 coordinate 4294967296 (element 3) does not fit in int32"},
	} {
		_, err := ReadCoordsNpy(bytes.NewReader(tc.raw))
		require.ErrorIs(t, err, ErrNpy, "case %d", i)
		require.ErrorContains(t, err, tc.msg, "case %d", i)
	}
	for i, tc := range []struct {
		dict, msg string
	}{
		{"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2, 2)}", "shape (N, C) or (N,), got (2, 2, 2)"},
		{"{'descr': '<f4', 'fortran_order': False, 'shape': ()}", "got ()"},
		{"{'descr': '<c8', 'fortran_order': False, 'shape': (2, 2)}", "features must be float32 or float64"},
		{"{'descr': '<f16', 'fortran_order': False, 'shape': (2, 2)}", "features must be float32 or float64"},
		{"{'descr': '|b1', 'fortran_order': False, 'shape': (2, 2)}", "features must be float32 or float64"},
	} {
		_, err := ReadFeatsNpy(bytes.NewReader(handNpy(1, tc.dict, make([]byte, 64))))
		require.ErrorIs(t, err, ErrNpy, "case %d", i)
		require.ErrorContains(t, err, tc.msg, "case %d", i)
	}
}

func TestSaveLoadTensor(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tt := range []*Tensor{
		randomTensor[float32](rng, Extent{Batch: 3, X: 50, Y: 40, Z: 30}, 1000, 4),
		randomTensor[float64](rng, Extent{Batch: 1, X: 8, Y: 8, Z: 8}, 10, 1),
		{Coords: []int32{}, Feats: Matrix{Rows: 0, Cols: 2, Data: []float32{}}, Extent: Extent{Batch: 2, X: 3, Y: 4, Z: 5}},
	} {
		dir := filepath.Join(t.TempDir(), "sub", "tensor")
		require.NoError(t, SaveTensor(dir, tt))
		back, err := LoadTensor(dir)
		require.NoError(t, err)
		require.Equal(t, tt.Coords, back.Coords)
		require.Equal(t, tt.Feats, back.Feats)
		require.Equal(t, tt.Extent, back.Extent)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		require.Equal(t, []string{CoordsFile, ExtentFile, FeatsFile}, names, "no temporary files are left")

		// Without the extent file the extent is derived from the coordinates.
		require.NoError(t, os.Remove(filepath.Join(dir, ExtentFile)))
		back, err = LoadTensor(dir)
		require.NoError(t, err)
		require.Equal(t, coordsExtent(tt.Coords), back.Extent)
		require.NoError(t, ValidateCoords(back.Coords, back.Extent))
	}
	require.Equal(t, Extent{Batch: 1, X: 1, Y: 1, Z: 1}, coordsExtent(nil))
	require.Equal(t, Extent{Batch: 3, X: 1, Y: 8, Z: 2}, coordsExtent([]int32{2, 0, 7, 1, 0, 0, 0, 0}))

	dir := t.TempDir()
	_, err := LoadTensor(dir)
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorIs(t, SaveTensor(dir, nil), ErrShape)
	require.ErrorIs(t, SaveTensor(dir, &Tensor{Coords: []int32{0, 0, 0, 0, 0, 0, 0, 0}, Feats: NewMatrix[float32](2, 1), Extent: Extent{Batch: 1, X: 1, Y: 1, Z: 1}}), ErrDuplicate)
	require.ErrorIs(t, SaveTensor(dir, &Tensor{Coords: []int32{0, 0, 0, 0}, Feats: Matrix{Rows: 1, Cols: 1, Data: []int32{1}}, Extent: Extent{Batch: 1, X: 1, Y: 1, Z: 1}}), ErrDType)

	// A bad file names itself; bad contents are reported as NewTensor does.
	tt := &Tensor{Coords: []int32{0, 1, 1, 1}, Feats: NewMatrix[float32](1, 2), Extent: Extent{Batch: 1, X: 2, Y: 2, Z: 2}}
	require.NoError(t, SaveTensor(dir, tt))
	require.NoError(t, os.WriteFile(filepath.Join(dir, FeatsFile), npyFile(t, "feats_f2.npy"), 0o644))
	_, err = LoadTensor(dir)
	require.ErrorIs(t, err, ErrNpy)
	require.ErrorContains(t, err, FeatsFile)
	require.NoError(t, SaveTensor(dir, tt))
	var buf bytes.Buffer
	require.NoError(t, writeNpy(&buf, "<i8", []int{4}, 4, func(dst []byte, i int) { binary.LittleEndian.PutUint64(dst, 1) }))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ExtentFile), buf.Bytes(), 0o644))
	_, err = LoadTensor(dir)
	require.ErrorIs(t, err, ErrOutOfRange, "(0, 1, 1, 1) is outside a 1³ extent")
	buf.Reset()
	require.NoError(t, writeNpy(&buf, "<i8", []int{3}, 3, func(dst []byte, i int) { binary.LittleEndian.PutUint64(dst, 1) }))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ExtentFile), buf.Bytes(), 0o644))
	_, err = LoadTensor(dir)
	require.ErrorIs(t, err, ErrNpy)
	require.ErrorContains(t, err, "shape (3,)")
	buf.Reset()
	require.NoError(t, writeNpy(&buf, "<i8", []int{4}, 4, func(dst []byte, i int) { binary.LittleEndian.PutUint64(dst, uint64(int64(i-1))) }))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ExtentFile), buf.Bytes(), 0o644))
	_, err = LoadTensor(dir)
	require.ErrorIs(t, err, ErrNpy)
	require.ErrorContains(t, err, "every dimension")
	require.NoError(t, os.WriteFile(filepath.Join(dir, CoordsFile), []byte("not npy"), 0o644))
	_, err = LoadTensor(dir)
	require.ErrorIs(t, err, ErrNpy)
	require.ErrorContains(t, err, CoordsFile)
}

// TestNumpyReadsOurFiles loads SaveTensor output with numpy when a python3
// with numpy is installed; it is skipped otherwise.
func TestNumpyReadsOurFiles(t *testing.T) {
	py := ""
	for _, cand := range []string{"python3", "/usr/bin/python3"} {
		if p, err := exec.LookPath(cand); err == nil && exec.Command(p, "-c", "import numpy").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		t.Skip("no python3 with numpy is installed")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	tt := randomTensor[float64](rng, Extent{Batch: 2, X: 9, Y: 9, Z: 9}, 20, 3)
	dir := t.TempDir()
	require.NoError(t, SaveTensor(dir, tt))
	script := fmt.Sprintf(`
import numpy as np
c = np.load(%[1]q + "/coords.npy"); f = np.load(%[1]q + "/feats.npy"); e = np.load(%[1]q + "/extent.npy")
assert c.dtype == np.int32 and c.shape == (20, 4) and c.flags.c_contiguous, (c.dtype, c.shape)
assert f.dtype == np.float64 and f.shape == (20, 3), (f.dtype, f.shape)
assert e.dtype == np.int64 and e.tolist() == [2, 9, 9, 9], e
print(" ".join(str(v) for v in c.ravel().tolist()))
print(" ".join(repr(float(v)) for v in f.ravel().tolist()))
`, dir)
	out, err := exec.Command(py, "-c", script).CombinedOutput()
	require.NoError(t, err, string(out))
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2)
	require.Equal(t, strings.Trim(fmt.Sprint(tt.Coords), "[]"), lines[0])
	var want []string
	for _, v := range tt.Feats.F64() {
		want = append(want, fmt.Sprint(float64(v)))
	}
	got := strings.Fields(lines[1])
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i], strings.TrimSuffix(got[i], ".0"), "element %d", i)
	}
}

func FuzzReadNpy(f *testing.F) {
	f.Add(handNpy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 4), }", le32(0, 1, 2, 3, 1, 5, 6, 7)))
	f.Add(handNpy(2, "{'descr': '>i8', 'fortran_order': True, 'shape': (1, 4), }", make([]byte, 32)))
	f.Add(handNpy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", make([]byte, 24)))
	f.Add(handNpy(3, "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", make([]byte, 24)))
	f.Add([]byte("\x93NUMPY\x01\x00"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if coords, err := ReadCoordsNpy(bytes.NewReader(raw)); err == nil {
			require.Zero(t, len(coords)%4)
			var buf bytes.Buffer
			require.NoError(t, WriteCoordsNpy(&buf, coords))
			back, err := ReadCoordsNpy(&buf)
			require.NoError(t, err)
			require.Equal(t, coords, back)
		} else {
			require.ErrorIs(t, err, ErrNpy)
		}
		if m, err := ReadFeatsNpy(bytes.NewReader(raw)); err == nil {
			require.NoError(t, m.Validate())
			var buf bytes.Buffer
			require.NoError(t, WriteFeatsNpy(&buf, m))
			back, err := ReadFeatsNpy(&buf)
			require.NoError(t, err)
			require.Equal(t, m.Rows, back.Rows)
			require.Equal(t, m.Cols, back.Cols)
			require.Equal(t, m.Len(), back.Len())
		} else {
			require.ErrorIs(t, err, ErrNpy)
		}
	})
}

func ExampleWriteCoordsNpy() {
	var buf bytes.Buffer
	_ = WriteCoordsNpy(&buf, []int32{0, 1, 2, 3, 0, 4, 5, 6})
	header := buf.Bytes()[10:bytes.IndexByte(buf.Bytes(), '\n')]
	fmt.Printf("%d bytes, header %s\n", buf.Len(), bytes.TrimRight(header, " "))
	coords, err := ReadCoordsNpy(&buf)
	fmt.Println(coords, err)
	// Output:
	// 160 bytes, header {'descr': '<i4', 'fortran_order': False, 'shape': (2, 4), }
	// [0 1 2 3 0 4 5 6] <nil>
}

func ExampleSaveTensor() {
	feats, _ := MatrixOf(2, 1, []float32{0.5, 1.5})
	t, _ := NewTensor([]int32{0, 1, 2, 3, 1, 0, 0, 0}, feats, Extent{Batch: 2, X: 4, Y: 4, Z: 4})
	dir, _ := os.MkdirTemp("", "tensor")
	defer os.RemoveAll(dir)
	if err := SaveTensor(dir, t); err != nil {
		fmt.Println(err)
		return
	}
	back, err := LoadTensor(dir)
	fmt.Println(back.Coords, back.Feats.F32(), back.Extent, err)
	// Output:
	// [0 1 2 3 1 0 0 0] [0.5 1.5] Extent{Batch:2 X:4 Y:4 Z:4} <nil>
}

func BenchmarkCoordsNpy(b *testing.B) {
	const n = 4_113_056
	coords := make([]int32, 4*n)
	for i := range coords {
		coords[i] = int32(i)
	}
	var buf bytes.Buffer
	if err := WriteCoordsNpy(&buf, coords); err != nil {
		b.Fatal(err)
	}
	raw := buf.Bytes()
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			if err := WriteCoordsNpy(io.Discard, coords); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(raw))*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
	})
	b.Run("read", func(b *testing.B) {
		for b.Loop() {
			if _, err := ReadCoordsNpy(bytes.NewReader(raw)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(raw))*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
	})
}
