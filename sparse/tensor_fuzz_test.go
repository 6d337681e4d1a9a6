package sparse

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzNewTensor builds tensors from arbitrary coordinates and extents and
// checks NewTensor against a brute-force definition of validity: it
// accepts exactly the inputs whose rows are in range and unique, and
// rejects the others with the sentinel that names the problem, never
// panicking.
func FuzzNewTensor(f *testing.F) {
	f.Add(uint8(1), uint8(4), uint8(4), uint8(4), []byte{0, 1, 2, 3, 0, 1, 2, 2})
	f.Add(uint8(2), uint8(1), uint8(3), uint8(2), []byte{1, 0, 2, 1, 1, 0, 2, 1})
	f.Add(uint8(1), uint8(2), uint8(2), uint8(2), []byte{0xff, 0, 0, 0})
	f.Add(uint8(0), uint8(2), uint8(2), uint8(2), []byte{})
	f.Fuzz(func(t *testing.T, b, x, y, z uint8, raw []byte) {
		ext := Extent{Batch: int(b), X: int(x), Y: int(y), Z: int(z)}
		// Every 2 bytes make one signed coordinate; an odd tail is dropped,
		// so lengths that are not multiples of 4 occur too.
		coords := make([]int32, len(raw)/2)
		for i := range coords {
			coords[i] = int32(int16(binary.LittleEndian.Uint16(raw[2*i:])))
		}
		n := len(coords) / 4
		feats := Matrix{Rows: n, Cols: 1, Data: make([]float32, n)}
		_, err := NewTensor(coords, feats, ext)

		switch {
		case ext.Batch <= 0 || ext.X <= 0 || ext.Y <= 0 || ext.Z <= 0:
			if err == nil {
				t.Fatalf("extent %v accepted", ext)
			}
			return
		case len(coords)%4 != 0:
			if !errors.Is(err, ErrShape) {
				t.Fatalf("length %d: got %v, want ErrShape", len(coords), err)
			}
			return
		}
		var wantErr error
		seen := map[[4]int32]bool{}
		for r := range n {
			c := [4]int32{coords[4*r], coords[4*r+1], coords[4*r+2], coords[4*r+3]}
			if !ext.Contains(int(c[0]), int(c[1]), int(c[2]), int(c[3])) {
				wantErr = ErrOutOfRange
				break
			}
			if seen[c] && wantErr == nil {
				wantErr = ErrDuplicate
			}
			seen[c] = true
		}
		if wantErr == ErrDuplicate {
			// Range errors are reported first, over the whole array.
			for r := range n {
				c := coords[4*r : 4*r+4]
				if !ext.Contains(int(c[0]), int(c[1]), int(c[2]), int(c[3])) {
					wantErr = ErrOutOfRange
				}
			}
		}
		if wantErr == nil {
			if err != nil {
				t.Fatalf("valid coordinates %v in %v rejected: %v", coords, ext, err)
			}
			return
		}
		if !errors.Is(err, wantErr) {
			t.Fatalf("coordinates %v in %v: got %v, want %v", coords, ext, err, wantErr)
		}
	})
}
