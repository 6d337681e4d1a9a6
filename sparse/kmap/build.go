package kmap

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// ErrCoords reports malformed coordinates given to a map builder.
var ErrCoords = errors.New("kmap: bad coordinates")

// index finds the row of a site of an extent. It is the only place the map
// builders look coordinates up.
type index struct {
	ext  grid.Extent
	rows map[uint64]int32
}

func newIndex(coords []int32, ext grid.Extent) (*index, error) {
	if err := checkCoords(coords, ext); err != nil {
		return nil, err
	}
	n := len(coords) / 4
	ix := &index{ext: ext, rows: make(map[uint64]int32, n)}
	for r := range n {
		c := coords[4*r : 4*r+4]
		k := ext.Key(int(c[0]), int(c[1]), int(c[2]), int(c[3]))
		if q, dup := ix.rows[k]; dup {
			return nil, fmt.Errorf("%w: rows %d and %d are both %v", ErrCoords, q, r, c)
		}
		ix.rows[k] = int32(r)
	}
	return ix, nil
}

func (ix *index) lookup(b, x, y, z int) int32 {
	if !ix.ext.Contains(b, x, y, z) {
		return -1
	}
	if r, ok := ix.rows[ix.ext.Key(b, x, y, z)]; ok {
		return r
	}
	return -1
}

func checkCoords(coords []int32, ext grid.Extent) error {
	if err := ext.Validate(); err != nil {
		return err
	}
	if len(coords)%4 != 0 {
		return fmt.Errorf("%w: length %d is not a multiple of 4", ErrCoords, len(coords))
	}
	if len(coords)/4 >= math.MaxInt32 {
		return fmt.Errorf("%w: %d rows overflow 32-bit indices", ErrCoords, len(coords)/4)
	}
	for r := 0; r < len(coords)/4; r++ {
		c := coords[4*r : 4*r+4]
		if !ext.Contains(int(c[0]), int(c[1]), int(c[2]), int(c[3])) {
			return fmt.Errorf("%w: row %d %v is outside %v", ErrCoords, r, c, ext)
		}
	}
	return nil
}

// NewSubmanifold builds the map of a submanifold convolution over coords
// (flat [N, 4]) in ext: outputs are the inputs, and
// Nbr[o, v] = row at coords[o] + (k(v) − ⌊K/2⌋)·dilation.
// Kernel sizes must be odd.
func NewSubmanifold(coords []int32, ext grid.Extent, kernel, dilation [3]int) (*Map, error) {
	conv := grid.Submanifold(kernel, dilation)
	if err := conv.ValidateSubmanifold(); err != nil {
		return nil, err
	}
	ix, err := newIndex(coords, ext)
	if err != nil {
		return nil, err
	}
	m := &Map{Kind: Submanifold, Conv: conv, In: ext, Out: ext, NIn: len(coords) / 4, NOut: len(coords) / 4, OutCoords: coords}
	m.Nbr = gatherTable(m, coords, ix, exactFine(conv))
	return m, nil
}

// NewStrided builds the map of a strided (generative) sparse convolution
// over coords in ext. If outCoords is nil the outputs are every site of the
// output grid (conv.StridedExtent(ext)) that some input reaches, sorted by
// (batch, x, y, z); otherwise they are the given coordinates, which must lie
// in the output grid and be unique. Nbr[o, v] = row at
// outCoords[o]·stride − padding + k(v)·dilation.
func NewStrided(coords []int32, ext grid.Extent, conv grid.Conv, outCoords []int32) (*Map, error) {
	if err := conv.Validate(); err != nil {
		return nil, err
	}
	out, err := conv.StridedExtent(ext)
	if err != nil {
		return nil, err
	}
	ix, err := newIndex(coords, ext)
	if err != nil {
		return nil, err
	}
	if outCoords == nil {
		outCoords = reached(coords, out, conv, conv.Coarse)
	} else if _, err := newIndex(outCoords, out); err != nil {
		return nil, fmt.Errorf("output coordinates: %w", err)
	}
	m := &Map{Kind: Strided, Conv: conv, In: ext, Out: out, NIn: len(coords) / 4, NOut: len(outCoords) / 4, OutCoords: outCoords}
	m.Nbr = gatherTable(m, outCoords, ix, exactFine(conv))
	return m, nil
}

// NewTransposed builds the map of a sparse transposed convolution
// (ConvTranspose3d) over coords in ext: the outputs are every site of
// conv.TransposedExtent(ext) reached as input·stride − padding +
// k·dilation, sorted by (batch, x, y, z), and Nbr[o, v] is the input that
// reaches output o through tap v.
func NewTransposed(coords []int32, ext grid.Extent, conv grid.Conv) (*Map, error) {
	if err := conv.Validate(); err != nil {
		return nil, err
	}
	out, err := conv.TransposedExtent(ext)
	if err != nil {
		return nil, err
	}
	ix, err := newIndex(coords, ext)
	if err != nil {
		return nil, err
	}
	outCoords := reached(coords, out, conv, exactFine(conv))
	m := &Map{Kind: Transposed, Conv: conv, In: ext, Out: out, NIn: len(coords) / 4, NOut: len(outCoords) / 4, OutCoords: outCoords}
	m.Nbr = gatherTable(m, outCoords, ix, conv.Coarse)
	return m, nil
}

// NewInverse builds the map that goes back from the output of the strided
// map s to exactly s's input coordinates (the decoder half of a UNet). It is
// a transposed convolution with s's geometry whose outputs are s's inputs:
// Nbr[i, v] = s.Rev()[i, v].
func NewInverse(s *Map) (*Map, error) {
	if s.Kind != Strided {
		return nil, fmt.Errorf("%w: NewInverse needs a strided map, got %v", ErrCoords, s.Kind)
	}
	var inCoords []int32
	if s.NIn > 0 {
		// The strided map's input coordinates are not stored; recover them
		// from the output coordinates through the table.
		inCoords = make([]int32, 4*s.NIn)
		V := s.V()
		for o := range s.NOut {
			oc := s.OutCoords[4*o : 4*o+4]
			for v := range V {
				i := s.Nbr[o*V+v]
				if i < 0 {
					continue
				}
				k := s.Conv.Tap(v)
				inCoords[4*i] = oc[0]
				for a := range 3 {
					inCoords[4*i+1+int32(a)] = int32(s.Conv.Fine(a, int(oc[1+a]), k[a]))
				}
			}
		}
	}
	m := &Map{Kind: Inverse, Conv: s.Conv, In: s.Out, Out: s.In, NIn: s.NOut, NOut: s.NIn, OutCoords: inCoords}
	m.Nbr = s.Reverse()
	return m, nil
}

// exactFine adapts conv.Fine to the (value, exact) form of conv.Coarse.
func exactFine(conv grid.Conv) func(a, c, k int) (int, bool) {
	return func(a, c, k int) (int, bool) { return conv.Fine(a, c, k), true }
}

// gatherTable fills Nbr[o, v] with the input row at src(a, out[o][a], k[a])
// on each axis, or −1.
func gatherTable(m *Map, outCoords []int32, ix *index, src func(a, c, k int) (int, bool)) []int32 {
	V := m.Conv.Volume()
	nbr := make([]int32, m.NOut*V)
	taps := make([][3]int, V)
	for v := range taps {
		taps[v] = m.Conv.Tap(v)
	}
	parallelRows(m.NOut, func(lo, hi int) {
		for o := lo; o < hi; o++ {
			c := outCoords[4*o : 4*o+4]
			row := nbr[o*V : o*V+V]
			for v, k := range taps {
				row[v] = -1
				var p [3]int
				ok := true
				for a := range 3 {
					q, exact := src(a, int(c[1+a]), k[a])
					if !exact {
						ok = false
						break
					}
					p[a] = q
				}
				if ok {
					row[v] = ix.lookup(int(c[0]), p[0], p[1], p[2])
				}
			}
		}
	})
	return nbr
}

// reached returns the sorted unique sites of out reached from coords through
// dst(a, in[a], k[a]) on each axis.
func reached(coords []int32, out grid.Extent, conv grid.Conv, dst func(a, c, k int) (int, bool)) []int32 {
	V := conv.Volume()
	keys := make([]uint64, 0, len(coords)/4)
	for r := 0; r < len(coords)/4; r++ {
		c := coords[4*r : 4*r+4]
		for v := range V {
			k := conv.Tap(v)
			var p [3]int
			ok := true
			for a := range 3 {
				q, exact := dst(a, int(c[1+a]), k[a])
				if !exact {
					ok = false
					break
				}
				p[a] = q
			}
			if ok && out.Contains(int(c[0]), p[0], p[1], p[2]) {
				keys = append(keys, out.Key(int(c[0]), p[0], p[1], p[2]))
			}
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	oc := make([]int32, 4*len(keys))
	for j, k := range keys {
		b, x, y, z := out.Unkey(k)
		oc[4*j], oc[4*j+1], oc[4*j+2], oc[4*j+3] = int32(b), int32(x), int32(y), int32(z)
	}
	return oc
}
