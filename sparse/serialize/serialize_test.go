package serialize

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

var modes = []Mode{ZOrder, Hilbert}

func cube(batch, n int) grid.Extent { return grid.Extent{Batch: batch, X: n, Y: n, Z: n} }

func TestBits(t *testing.T) {
	tests := []struct {
		ext       grid.Extent
		axis, bat int
		err       error
	}{
		{ext: cube(1, 1), axis: 0, bat: 0},                                         // 0: a single site needs no bits
		{ext: cube(2, 1), axis: 0, bat: 1},                                         // 1
		{ext: cube(1, 2), axis: 1, bat: 0},                                         // 2
		{ext: cube(3, 3), axis: 2, bat: 2},                                         // 3
		{ext: cube(4, 4), axis: 2, bat: 2},                                         // 4
		{ext: cube(5, 5), axis: 3, bat: 3},                                         // 5
		{ext: cube(1, 1024), axis: 10, bat: 0},                                     // 6
		{ext: cube(1, 1025), axis: 11, bat: 0},                                     // 7
		{ext: cube(1, 2048), axis: 11, bat: 0},                                     // 8
		{ext: grid.Extent{Batch: 1, X: 1, Y: 1, Z: 300}, axis: 9, bat: 0},          // 9: the largest axis decides
		{ext: grid.Extent{Batch: 1, X: 17, Y: 2, Z: 3}, axis: 5, bat: 0},           // 10
		{ext: grid.Extent{Batch: 1 << 31, X: 2048, Y: 1, Z: 1}, axis: 11, bat: 31}, // 11: 64 bits exactly
		{ext: cube(2, 1<<21), axis: 21, bat: 1},                                    // 12: 64 bits exactly
		{ext: cube(1, 1<<21), axis: 21, bat: 0},                                    // 13
		{ext: cube(1<<43, 128), axis: 7, bat: 43},                                  // 14: 64 bits exactly
		{ext: cube(1<<63-1, 1), axis: 0, bat: 63},                                  // 15
		{ext: cube(3, 1<<21), err: ErrTooLarge},                                    // 16: 65 bits
		{ext: cube(1<<43+1, 128), err: ErrTooLarge},                                // 17
		{ext: cube(1, 1<<21+1), err: ErrTooLarge},                                  // 18: 22 bits per axis
		{ext: grid.Extent{Batch: 1 << 31, X: 2049, Y: 1, Z: 1}, err: ErrTooLarge},  // 19
		{ext: grid.Extent{Batch: 0, X: 1, Y: 1, Z: 1}, err: ErrExtent},             // 20
		{ext: grid.Extent{Batch: 1, X: 4, Y: -1, Z: 1}, err: ErrExtent},            // 21
		{ext: grid.Extent{}, err: ErrExtent},                                       // 22
	}
	for i, tc := range tests {
		a, b, err := Bits(tc.ext)
		if tc.err != nil {
			require.ErrorIs(t, err, tc.err, "case %d", i)
			_, err = CodeBits(tc.ext)
			require.ErrorIs(t, err, tc.err, "case %d", i)
			continue
		}
		require.NoError(t, err, "case %d", i)
		require.Equal(t, tc.axis, a, "case %d axis bits", i)
		require.Equal(t, tc.bat, b, "case %d batch bits", i)
		cb, err := CodeBits(tc.ext)
		require.NoError(t, err)
		require.Equal(t, 3*a+b, cb)
		require.LessOrEqual(t, cb, 64)
	}
}

func TestModeNames(t *testing.T) {
	for _, m := range modes {
		require.NoError(t, m.Valid())
		p, err := ParseMode(m.String())
		require.NoError(t, err)
		require.Equal(t, m, p)
		txt, err := m.MarshalText()
		require.NoError(t, err)
		var u Mode
		require.NoError(t, u.UnmarshalText(txt))
		require.Equal(t, m, u)
	}
	require.Equal(t, "z_order", ZOrder.String())
	require.Equal(t, "hilbert", Hilbert.String())
	p, err := ParseMode(" Hilbert\n")
	require.NoError(t, err)
	require.Equal(t, Hilbert, p)
	for _, bad := range []string{"", "bxyz", "zorder", "hilbertx"} {
		_, err := ParseMode(bad)
		require.ErrorIs(t, err, ErrMode, bad)
		require.ErrorContains(t, err, strconv.Quote(bad))
	}
	require.ErrorIs(t, Mode(7).Valid(), ErrMode)
	require.Equal(t, "Mode(7)", Mode(7).String())
	_, err = Mode(2).MarshalText()
	require.ErrorIs(t, err, ErrMode)
	var u Mode
	require.ErrorIs(t, u.UnmarshalText([]byte("peano")), ErrMode)
	require.Equal(t, ZOrder, u, "a failed UnmarshalText leaves the mode alone")
	require.ErrorIs(t, Encode(Mode(9), nil, cube(1, 1), nil), ErrMode)
	require.ErrorIs(t, Decode(Mode(9), nil, cube(1, 1), nil), ErrMode)
}

// naiveMorton interleaves bit by bit, as the definition reads.
func naiveMorton(bits int, b, x, y, z uint32) uint64 {
	var c uint64
	for i := range bits {
		c |= uint64(x>>i&1) << (3*i + 2)
		c |= uint64(y>>i&1) << (3*i + 1)
		c |= uint64(z>>i&1) << (3 * i)
	}
	return c | uint64(b)<<(3*bits)
}

// randomPoints returns n rows inside ext: the eight spatial corners of every
// batch end (first and last batch), then uniform samples.
func randomPoints(rng *rand.Rand, ext grid.Extent, n int) []int32 {
	var out []int32
	for _, b := range []int{0, ext.Batch - 1} {
		for c := range 8 {
			x, y, z := 0, 0, 0
			if c&4 != 0 {
				x = ext.X - 1
			}
			if c&2 != 0 {
				y = ext.Y - 1
			}
			if c&1 != 0 {
				z = ext.Z - 1
			}
			out = append(out, int32(b), int32(x), int32(y), int32(z))
		}
	}
	for range n {
		out = append(out, int32(rng.IntN(ext.Batch)), int32(rng.IntN(ext.X)), int32(rng.IntN(ext.Y)), int32(rng.IntN(ext.Z)))
	}
	return out
}

// checkRoundTrip encodes coords, checks every code against the bit budget
// and the point-wise functions, decodes, and requires the exact input back.
func checkRoundTrip(t testing.TB, mode Mode, ext grid.Extent, coords []int32) []uint64 {
	t.Helper()
	axis, batch, err := Bits(ext)
	require.NoError(t, err)
	codes := make([]uint64, len(coords)/4)
	require.NoError(t, Encode(mode, coords, ext, codes), "%v %v", mode, ext)
	for i, c := range codes {
		p := coords[4*i : 4*i+4]
		if w := 3*axis + batch; w < 64 {
			require.Less(t, c, uint64(1)<<w, "%v %v row %d", mode, ext, i)
		}
		require.Equal(t, uint64(p[0]), c>>(3*axis), "batch field of row %d", i)
		if mode == ZOrder {
			require.Equal(t, naiveMorton(axis, uint32(p[0]), uint32(p[1]), uint32(p[2]), uint32(p[3])), c, "%v row %d", ext, i)
		}
	}
	back := make([]int32, len(coords))
	require.NoError(t, Decode(mode, codes, ext, back))
	require.Equal(t, coords, back, "%v %v", mode, ext)
	return codes
}

func TestRoundTripEverySize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	step := 1
	if testing.Short() {
		step = 7
	}
	for _, mode := range modes {
		for s := 1; s <= 2048; s += step {
			samples := 16
			if s <= 8 || s&(s-1) == 0 || (s-1)&(s-2) == 0 {
				samples = 128 // powers of two and their neighbours are the bit boundaries
			}
			for _, ext := range []grid.Extent{
				cube(1, s),
				{Batch: 3, X: s, Y: s/2 + 1, Z: 1},
				{Batch: 5, X: 1, Y: (s + 2) / 3, Z: s},
				{Batch: 2, X: s/3 + 1, Y: s, Z: s/5 + 1},
			} {
				checkRoundTrip(t, mode, ext, randomPoints(rng, ext, samples))
			}
		}
	}
}

// fullGrid lists every site of ext in (b, x, y, z) order.
func fullGrid(ext grid.Extent) []int32 {
	var out []int32
	for b := range ext.Batch {
		for x := range ext.X {
			for y := range ext.Y {
				for z := range ext.Z {
					out = append(out, int32(b), int32(x), int32(y), int32(z))
				}
			}
		}
	}
	return out
}

func TestFullGridsAreBijective(t *testing.T) {
	for _, mode := range modes {
		for _, ext := range []grid.Extent{
			cube(1, 1), cube(3, 1), cube(1, 2), cube(2, 4), cube(1, 8), cube(2, 16),
			cube(1, 3), cube(3, 5), cube(1, 7), cube(2, 12),
			{Batch: 2, X: 9, Y: 2, Z: 5}, {Batch: 1, X: 1, Y: 16, Z: 3},
		} {
			coords := fullGrid(ext)
			codes := checkRoundTrip(t, mode, ext, coords)
			sorted := slices.Clone(codes)
			slices.Sort(sorted)
			require.Equal(t, len(sorted), len(slices.Compact(slices.Clone(sorted))), "%v %v: codes collide", mode, ext)
			axis, _, _ := Bits(ext)
			if ext.X == ext.Y && ext.Y == ext.Z && ext.X == 1<<axis {
				// A full power-of-two grid uses every code below B·8^axis.
				for i, c := range sorted {
					require.Equal(t, uint64(i), c, "%v %v", mode, ext)
				}
			}
		}
	}
}

func TestZOrderLayout(t *testing.T) {
	ext := cube(4, 16)
	code := func(b, x, y, z int32) uint64 {
		out := make([]uint64, 1)
		require.NoError(t, Encode(ZOrder, []int32{b, x, y, z}, ext, out))
		return out[0]
	}
	// x holds the most significant slot of each bit triple.
	require.Equal(t, uint64(4), code(0, 1, 0, 0))
	require.Equal(t, uint64(2), code(0, 0, 1, 0))
	require.Equal(t, uint64(1), code(0, 0, 0, 1))
	require.Equal(t, uint64(0b100_010_001_000), code(0, 8, 4, 2))
	require.Equal(t, uint64(3)<<12|0xfff, code(3, 15, 15, 15))

	rng := rand.New(rand.NewPCG(3, 4))
	coords := randomPoints(rng, ext, 2000)
	codes := make([]uint64, len(coords)/4)
	require.NoError(t, Encode(ZOrder, coords, ext, codes))
	for range 20000 {
		i, j := rng.IntN(len(codes)), rng.IntN(len(codes))
		p, q := coords[4*i:4*i+4], coords[4*j:4*j+4]
		if p[0] < q[0] {
			require.Less(t, codes[i], codes[j], "batch is the most significant field")
		}
		if p[0] == q[0] && p[1] <= q[1] && p[2] <= q[2] && p[3] <= q[3] {
			require.LessOrEqual(t, codes[i], codes[j], "z-order is monotone in every axis: %v %v", p, q)
		}
	}
}

func TestHilbertIsContinuous(t *testing.T) {
	for k := 0; k <= 5; k++ {
		n := uint64(1) << (3 * k)
		var prev [3]uint32
		seen := make(map[[3]uint32]bool, n)
		for c := range n {
			b, x, y, z := DecodePoint(Hilbert, k, c)
			require.Zero(t, b)
			p := [3]uint32{x, y, z}
			require.False(t, seen[p], "k=%d code %d revisits %v", k, c, p)
			seen[p] = true
			for a := range 3 {
				require.Less(t, p[a], uint32(1)<<k)
			}
			if c == 0 {
				require.Equal(t, [3]uint32{}, p, "the curve starts at the origin")
			} else {
				dist := 0
				for a := range 3 {
					dist += int(max(p[a], prev[a]) - min(p[a], prev[a]))
				}
				require.Equal(t, 1, dist, "k=%d: codes %d and %d decode to %v and %v", k, c-1, c, prev, p)
			}
			require.Equal(t, c, EncodePoint(Hilbert, k, 0, x, y, z))
			prev = p
		}
		require.Len(t, seen, int(n))
	}
}

func TestBlocksAreAlignedCubes(t *testing.T) {
	const k = 4
	for _, mode := range modes {
		for l := 1; l <= 3; l++ {
			block := uint64(1) << (3 * l)
			for start := uint64(0); start < 1<<(3*k); start += block {
				_, x0, y0, z0 := DecodePoint(mode, k, start)
				for c := start; c < start+block; c++ {
					_, x, y, z := DecodePoint(mode, k, c)
					require.Equal(t, [3]uint32{x0 >> l, y0 >> l, z0 >> l}, [3]uint32{x >> l, y >> l, z >> l},
						"%v: code %d leaves the 2^%d cube of block %d", mode, c, l, start/block)
				}
			}
		}
	}
}

func TestLargeBatchKeepsEveryBit(t *testing.T) {
	// FlexGEMM's z-order kernel shifts the batch as a uint32 and loses its
	// high bits once 3·axisBits + batch bits passes 32; ours must not.
	rng := rand.New(rand.NewPCG(5, 6))
	for _, mode := range modes {
		for _, ext := range []grid.Extent{
			{Batch: 8, X: 2048, Y: 2048, Z: 2048},          // 33 + 3 bits
			{Batch: 1 << 31, X: 2048, Y: 7, Z: 1},          // 33 + 31 = 64 bits
			{Batch: 1<<31 - 5, X: 1024, Y: 1024, Z: 1024},  // 30 + 31 bits
			{Batch: 2, X: 1 << 21, Y: 1 << 21, Z: 1 << 21}, // 63 + 1 bits
			{Batch: math.MaxInt32, X: 1, Y: 1, Z: 1},       // batch bits only
		} {
			coords := randomPoints(rng, ext, 500)
			codes := checkRoundTrip(t, mode, ext, coords)
			axis, _, _ := Bits(ext)
			for i, c := range codes {
				require.Equal(t, uint64(coords[4*i]), c>>(3*axis))
			}
		}
	}
	out := make([]uint64, 1)
	require.NoError(t, Encode(ZOrder, []int32{5, 0, 0, 0}, cube(8, 2048), out))
	require.Equal(t, uint64(5)<<33, out[0])
	require.NoError(t, Encode(ZOrder, []int32{1<<31 - 1, 2047, 0, 0}, grid.Extent{Batch: 1 << 31, X: 2048, Y: 1, Z: 1}, out))
	require.Equal(t, uint64(1<<31-1)<<33|naiveMorton(11, 0, 2047, 0, 0), out[0])
}

func TestEncodeErrors(t *testing.T) {
	ext := grid.Extent{Batch: 2, X: 5, Y: 3, Z: 9}
	codes := make([]uint64, 1)
	for i, tc := range []struct {
		coords []int32
		out    []uint64
		ext    grid.Extent
		err    error
		msg    string
	}{
		{coords: []int32{0, 0, 0}, out: codes, ext: ext, err: ErrShape, msg: "length 3"},         // 0
		{coords: []int32{0, 0, 0, 0}, out: nil, ext: ext, err: ErrShape, msg: "0 output codes"},  // 1
		{coords: []int32{2, 0, 0, 0}, out: codes, ext: ext, err: ErrOutOfRange, msg: "row 0 (2"}, // 2: batch too large
		{coords: []int32{-1, 0, 0, 0}, out: codes, ext: ext, err: ErrOutOfRange},                 // 3
		{coords: []int32{0, 5, 0, 0}, out: codes, ext: ext, err: ErrOutOfRange},                  // 4: x = X, below 2^axisBits
		{coords: []int32{0, 0, 3, 0}, out: codes, ext: ext, err: ErrOutOfRange},                  // 5
		{coords: []int32{0, 0, 0, 9}, out: codes, ext: ext, err: ErrOutOfRange},                  // 6
		{coords: []int32{0, 0, -2, 0}, out: codes, ext: ext, err: ErrOutOfRange},                 // 7
		{coords: []int32{0, math.MinInt32, 0, 0}, out: codes, ext: ext, err: ErrOutOfRange},      // 8
		{coords: []int32{0, 0, 0, 0}, out: codes, ext: cube(3, 1<<21), err: ErrTooLarge},         // 9
		{coords: []int32{0, 0, 0, 0}, out: codes, ext: cube(0, 1), err: ErrExtent},               // 10
	} {
		for _, mode := range modes {
			err := Encode(mode, tc.coords, tc.ext, tc.out)
			require.ErrorIs(t, err, tc.err, "case %d", i)
			require.ErrorContains(t, err, tc.msg, "case %d", i)
		}
	}
	// N = 0.
	for _, mode := range modes {
		require.NoError(t, Encode(mode, nil, ext, nil))
		require.NoError(t, Encode(mode, []int32{}, ext, []uint64{}))
		require.NoError(t, Decode(mode, nil, ext, nil))
	}
}

func TestDecodeErrors(t *testing.T) {
	ext := grid.Extent{Batch: 3, X: 5, Y: 3, Z: 9} // 4 bits per axis, 2 batch bits
	for _, mode := range modes {
		out := make([]int32, 4)
		require.ErrorIs(t, Decode(mode, []uint64{0}, ext, out[:3]), ErrShape)
		// Batch 3 is a valid bit pattern but outside the extent.
		err := Decode(mode, []uint64{3 << 12}, ext, out)
		require.ErrorIs(t, err, ErrOutOfRange)
		require.ErrorContains(t, err, "index 0")
		require.ErrorIs(t, Decode(mode, []uint64{1 << 63}, ext, out), ErrOutOfRange)
		// Every code of the 16³ bit box must either decode to a site of ext
		// that encodes back to it, or be rejected.
		valid := 0
		for c := range uint64(3 << 12) {
			err := Decode(mode, []uint64{c}, ext, out)
			if err != nil {
				require.ErrorIs(t, err, ErrOutOfRange)
				continue
			}
			valid++
			back := make([]uint64, 1)
			require.NoError(t, Encode(mode, out, ext, back))
			require.Equal(t, c, back[0])
		}
		require.Equal(t, 3*5*3*9, valid, "%v: exactly the sites of the extent decode", mode)
	}
}

func TestFirstErrorIsDeterministic(t *testing.T) {
	ext := cube(2, 64)
	rng := rand.New(rand.NewPCG(7, 8))
	n := 5*chunk + 123
	coords := randomPoints(rng, ext, n)
	rows := len(coords) / 4
	for _, r := range []int{3*chunk + 17, 4*chunk + 1, rows - 1} {
		coords[4*r+2] = 64 // out of range
	}
	codes := make([]uint64, rows)
	for i := range codes {
		codes[i] = rng.Uint64N(2 << 18)
	}
	codes[2*chunk+5] = 2 << 18
	codes[4*chunk] = 7 << 18
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var first, firstDec string
	var firstCodes []uint64
	for _, procs := range []int{1, 2, 3, 8} {
		runtime.GOMAXPROCS(procs)
		for _, mode := range modes {
			out := make([]uint64, rows)
			err := Encode(mode, coords, ext, out)
			require.ErrorIs(t, err, ErrOutOfRange)
			require.ErrorContains(t, err, fmt.Sprintf("row %d ", 3*chunk+17))
			dec := Decode(mode, codes, ext, make([]int32, 4*rows))
			require.ErrorIs(t, dec, ErrOutOfRange)
			require.ErrorContains(t, dec, fmt.Sprintf("index %d ", 2*chunk+5))
			if mode == Hilbert {
				if first == "" {
					first, firstDec = err.Error(), dec.Error()
				}
				require.Equal(t, first, err.Error())
				require.Equal(t, firstDec, dec.Error())
			}
		}
		good := coords[:4*3*chunk]
		out := make([]uint64, len(good)/4)
		require.NoError(t, Encode(Hilbert, good, ext, out))
		if firstCodes == nil {
			firstCodes = out
		}
		require.Equal(t, firstCodes, out, "GOMAXPROCS=%d", procs)
	}
}

func TestFlexGEMMGolden(t *testing.T) {
	f, err := os.Open("testdata/flexgemm_golden.txt")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	lines := map[Mode]int{}
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		require.Len(t, fields, 7, sc.Text())
		mode, err := ParseMode(fields[0])
		require.NoError(t, err)
		var v [5]uint64
		for i := range v {
			v[i], err = strconv.ParseUint(fields[i+1], 10, 64)
			require.NoError(t, err)
		}
		want, err := strconv.ParseUint(fields[6], 10, 64)
		require.NoError(t, err)
		axis := int(v[0])
		b, x, y, z := uint32(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4])
		require.Equal(t, want, EncodePoint(mode, axis, b, x, y, z), sc.Text())
		if b <= math.MaxInt32 {
			// Through the checked path, in the cube with these bits.
			ext := cube(int(b)+1, 1<<axis)
			out := make([]uint64, 1)
			require.NoError(t, Encode(mode, []int32{int32(b), int32(x), int32(y), int32(z)}, ext, out))
			require.Equal(t, want, out[0])
		}
		gb, gx, gy, gz := DecodePoint(mode, axis, want)
		require.Equal(t, [4]uint32{b, x, y, z}, [4]uint32{gb, gx, gy, gz}, sc.Text())
		lines[mode]++
	}
	require.NoError(t, sc.Err())
	require.Greater(t, lines[ZOrder], 400)
	require.Greater(t, lines[Hilbert], 1000)
}

func TestArgsort(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for i, codes := range [][]uint64{
		nil,
		{},
		{42},
		{0, 0, 0},
		{3, 1, 2, 1, 3, 0},
		{math.MaxUint64, 0, 1 << 63, math.MaxUint64, 1},
		randomCodes(rng, 10000, 1<<20),         // many duplicates
		randomCodes(rng, 10000, 1<<12),         // digits below one pass
		randomCodes(rng, 5000, math.MaxUint64), // all 64 bits
	} {
		perm, err := Argsort(codes)
		require.NoError(t, err, "case %d", i)
		want := make([]int32, len(codes))
		for j := range want {
			want[j] = int32(j)
		}
		slices.SortStableFunc(want, func(a, b int32) int {
			switch {
			case codes[a] < codes[b]:
				return -1
			case codes[a] > codes[b]:
				return 1
			}
			return 0
		})
		require.Equal(t, want, perm, "case %d", i)
		perm2, sorted, err := SortCodes(codes)
		require.NoError(t, err)
		require.Equal(t, want, perm2, "case %d", i)
		require.Len(t, sorted, len(codes))
		for j, p := range want {
			require.Equal(t, codes[p], sorted[j], "case %d", i)
		}
	}
}

func randomCodes(rng *rand.Rand, n int, bound uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		if bound == math.MaxUint64 {
			out[i] = rng.Uint64()
		} else {
			out[i] = rng.Uint64N(bound)
		}
		if i%7 == 3 && i > 0 {
			out[i] = out[i-1]
		}
	}
	return out
}

// fuzzExtent turns fuzz input into an extent with small-to-huge axes.
func fuzzExtent(b, x, y, z uint32) grid.Extent {
	dim := func(v uint32) int { return int(v%(1<<22)) + 1 }
	return grid.Extent{Batch: int(b%(1<<31)) + 1, X: dim(x), Y: dim(y), Z: dim(z)}
}

func fuzzRoundTrip(f *testing.F, mode Mode) {
	f.Add(uint32(0), uint32(0), uint32(0), uint32(0), int32(0), int32(0), int32(0), int32(0), uint64(0))
	f.Add(uint32(7), uint32(2047), uint32(2047), uint32(2047), int32(5), int32(2047), int32(3), int32(1000), uint64(1)<<40)
	f.Add(uint32(1<<31-1), uint32(2047), uint32(0), uint32(5), int32(1<<31-2), int32(17), int32(0), int32(4), uint64(math.MaxUint64))
	f.Add(uint32(1), uint32(1<<21-1), uint32(1<<21-1), uint32(1<<21-1), int32(1), int32(-1), int32(0), int32(0), uint64(1)<<63)
	f.Fuzz(func(t *testing.T, eb, ex, ey, ez uint32, b, x, y, z int32, code uint64) {
		ext := fuzzExtent(eb, ex, ey, ez)
		axis, _, err := Bits(ext)
		if err != nil {
			require.ErrorIs(t, err, ErrTooLarge)
			require.ErrorIs(t, Encode(mode, []int32{b, x, y, z}, ext, make([]uint64, 1)), ErrTooLarge)
			return
		}
		coords := []int32{b, x, y, z}
		codes := make([]uint64, 1)
		err = Encode(mode, coords, ext, codes)
		if !ext.Contains(int(b), int(x), int(y), int(z)) {
			require.ErrorIs(t, err, ErrOutOfRange)
		} else {
			require.NoError(t, err)
			back := make([]int32, 4)
			require.NoError(t, Decode(mode, codes, ext, back))
			require.Equal(t, coords, back)
			require.Equal(t, uint64(b), codes[0]>>(3*axis))
		}
		// An arbitrary code either decodes to a site that encodes back to
		// it, or is rejected.
		out := make([]int32, 4)
		if err := Decode(mode, []uint64{code}, ext, out); err != nil {
			require.ErrorIs(t, err, ErrOutOfRange)
			return
		}
		require.True(t, ext.Contains(int(out[0]), int(out[1]), int(out[2]), int(out[3])))
		require.NoError(t, Encode(mode, out, ext, codes))
		require.Equal(t, code, codes[0])
	})
}

func FuzzZOrderRoundTrip(f *testing.F) { fuzzRoundTrip(f, ZOrder) }

func FuzzHilbertRoundTrip(f *testing.F) { fuzzRoundTrip(f, Hilbert) }

func TestErrorsAreDistinct(t *testing.T) {
	all := []error{ErrMode, ErrExtent, ErrTooLarge, ErrShape, ErrOutOfRange}
	for i, a := range all {
		for j, b := range all {
			require.Equal(t, i == j, errors.Is(a, b))
		}
	}
}
