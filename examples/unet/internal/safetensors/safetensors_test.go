package safetensors

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func sample(t *testing.T) []Tensor {
	t.Helper()
	var out []Tensor
	for _, c := range []struct {
		name  string
		shape []int
		data  any
	}{
		{"enc.weight", []int{2, 1, 1, 1, 3}, []float32{1, -2, 3.5, 0, 1e-8, -7}},
		{"enc.bias", []int{2}, []float64{0.25, -1e300}},
		{"steps", []int{}, []int64{42}},
		{"empty", []int{0, 4}, []int32{}},
		{"labels", []int{3}, []int32{-1, 0, 7}},
	} {
		tt, err := NewTensor(c.name, c.shape, c.data)
		require.NoError(t, err)
		out = append(out, tt)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	ts := sample(t)
	meta := map[string]string{"format": "pt", "note": "ünïcode \"quoted\""}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	require.NoError(t, Save(path, ts, meta))
	f, err := Load(path)
	require.NoError(t, err)
	require.Equal(t, meta, f.Metadata)
	require.Equal(t, len(ts), len(f.Tensors))
	for i, want := range ts {
		got := f.Tensors[i] // data order is write order
		require.Equal(t, want.Name, got.Name)
		require.Equal(t, want.DType, got.DType)
		require.Equal(t, want.Shape, got.Shape)
		require.Equal(t, want.Data, got.Data)
		g2, ok := f.Get(want.Name)
		require.True(t, ok)
		require.Equal(t, got, g2)
	}
	_, ok := f.Get("missing")
	require.False(t, ok)
	// No temporary file is left behind.
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1)
}

// TestGoldenBytes pins the exact layout the format specifies.
func TestGoldenBytes(t *testing.T) {
	w, err := NewTensor("w", []int{2}, []float32{1, -2})
	require.NoError(t, err)
	b, err := Encode([]Tensor{w}, nil)
	require.NoError(t, err)
	hdr := `{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	for len(hdr)%8 != 0 {
		hdr += " "
	}
	want := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	want = append(want, hdr...)
	want = append(want, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0) // 1.0f, -2.0f little-endian
	require.Equal(t, want, b)
}

func TestEncodeErrors(t *testing.T) {
	w, err := NewTensor("w", []int{2}, []float32{1, 2})
	require.NoError(t, err)
	_, err = Encode([]Tensor{w, w}, nil)
	require.ErrorIs(t, err, ErrFormat)
	require.Contains(t, err.Error(), "repeated")
	for _, c := range []struct {
		name  string
		shape []int
		data  any
		msg   string
	}{
		{"w", []int{3}, []float32{1, 2}, "needs 3 elements"},
		{"w", []int{-1}, []float32{}, "bad shape"},
		{"", []int{1}, []float32{1}, "reserved or empty"},
		{"__metadata__", []int{1}, []float32{1}, "reserved"},
		{"w", []int{1}, []uint8{1}, "unsupported data"},
	} {
		_, err := NewTensor(c.name, c.shape, c.data)
		require.ErrorIs(t, err, ErrFormat)
		require.Contains(t, err.Error(), c.msg)
	}
	_, err = Encode([]Tensor{{Name: "x", DType: F64, Shape: []int{1}, Data: []float32{1}}}, nil)
	require.ErrorContains(t, err, "needs []float64")
}

// file builds raw file bytes from a header string and data bytes.
func file(hdr string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	return append(append(b, hdr...), data...)
}

func TestDecodeRejects(t *testing.T) {
	eight := make([]byte, 8)
	good := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`
	_, err := Decode(file(good, eight))
	require.NoError(t, err, "the base case must be valid")
	huge := binary.LittleEndian.AppendUint64(nil, 1<<40)
	for _, c := range []struct {
		name string
		b    []byte
		msg  string
	}{
		{"empty", nil, "too short"},
		{"short", []byte{1, 2, 3}, "too short"},
		{"header past end", append(huge, '{', '}'), "does not fit"},
		{"truncated data", file(good, eight[:5]), "outside the 5 data bytes"},
		{"trailing bytes", file(good, make([]byte, 9)), "cover 8 of 9"},
		{"not json", file("garbage!", nil), "not a UTF-8 JSON object"},
		{"array", file(`[1, 2]  `, nil), "not a UTF-8 JSON object"},
		{"unterminated", file(`{"a":{"dtype":"F32"`, nil), "header"},
		{"stray after object", file(`{} {}`, nil), "stray bytes"},
		{"duplicate", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), "repeats \"a\""},
		{"unknown field", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}}`, eight), "unknown field"},
		{"unknown dtype", file(`{"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}}`, eight), "unsupported dtype \"Q7\""},
		{"missing shape", file(`{"a":{"dtype":"F32","data_offsets":[0,8]}}`, eight), "needs shape"},
		{"one offset", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}`, eight), "two data_offsets"},
		{"negative dim", file(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}`, eight), "dimension 0 is -2"},
		{"fractional dim", file(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,8]}}`, eight), "tensor \"a\""},
		{"size mismatch", file(`{"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}}`, eight), "needs 16 bytes"},
		{"reversed offsets", file(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}}`, eight), "outside"},
		{"hole", file(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), "starts at byte 4, want 0"},
		{"overlap", file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, eight), "holes or overlaps"},
		{"bad metadata", file(`{"__metadata__":{"k":1}}`, nil), "__metadata__"},
		{"bad utf8", file("{\"\xff\":{}}", nil), "UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode(c.b)
			require.ErrorIs(t, err, ErrFormat)
			require.Contains(t, err.Error(), c.msg)
		})
	}
}

func TestLoadErrorsNamePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.safetensors")
	require.NoError(t, os.WriteFile(path, []byte("not a checkpoint"), 0o644))
	_, err := Load(path)
	require.ErrorIs(t, err, ErrFormat)
	require.True(t, strings.HasPrefix(err.Error(), path))
	_, err = Load(filepath.Join(t.TempDir(), "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func FuzzDecode(f *testing.F) {
	b, err := Encode(sample(&testing.T{}), map[string]string{"k": "v"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(file(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		fl, err := Decode(b)
		if err != nil {
			require.ErrorIs(t, err, ErrFormat)
			return
		}
		// Whatever decodes must survive a re-encode unchanged in content.
		again, err := Encode(fl.Tensors, fl.Metadata)
		require.NoError(t, err)
		f2, err := Decode(again)
		require.NoError(t, err)
		require.Equal(t, len(fl.Tensors), len(f2.Tensors))
		for i := range fl.Tensors {
			require.Equal(t, fl.Tensors[i].Shape, f2.Tensors[i].Shape)
			require.Equal(t, fl.Tensors[i].DType, f2.Tensors[i].DType)
		}
	})
}
