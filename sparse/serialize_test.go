package sparse

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/serialize"
)

// randomTensor returns n distinct random sites of ext with c random
// features of type T.
func randomTensor[T Float | ~int32](rng *rand.Rand, ext Extent, n, c int) *Tensor {
	seen := map[[4]int32]bool{}
	coords := make([]int32, 0, 4*n)
	for len(coords) < 4*n {
		p := [4]int32{int32(rng.IntN(ext.Batch)), int32(rng.IntN(ext.X)), int32(rng.IntN(ext.Y)), int32(rng.IntN(ext.Z))}
		if !seen[p] {
			seen[p] = true
			coords = append(coords, p[:]...)
		}
	}
	feats := make([]T, n*c)
	for i := range feats {
		feats[i] = T(rng.IntN(1000))
	}
	return &Tensor{Coords: coords, Feats: Matrix{Rows: n, Cols: c, Data: feats}, Extent: ext}
}

func TestEncodeDecodeCoords(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ext := Extent{Batch: 3, X: 40, Y: 7, Z: 100}
	tt := randomTensor[float32](rng, ext, 500, 1)
	for _, mode := range []SerialMode{ZOrder, Hilbert} {
		codes, err := EncodeCoords(tt.Coords, ext, mode)
		require.NoError(t, err)
		require.Len(t, codes, 500)
		want := make([]uint64, 500)
		require.NoError(t, serialize.Encode(mode, tt.Coords, ext, want))
		require.Equal(t, want, codes)
		back, err := DecodeCoords(codes, ext, mode)
		require.NoError(t, err)
		require.Equal(t, tt.Coords, back)

		_, err = EncodeCoords([]int32{0, 0, 0}, ext, mode)
		require.ErrorIs(t, err, ErrShape)
		_, err = EncodeCoords([]int32{0, 40, 0, 0}, ext, mode)
		require.ErrorIs(t, err, ErrOutOfRange)
		require.ErrorIs(t, err, serialize.ErrOutOfRange)
		_, err = DecodeCoords([]uint64{1 << 40}, ext, mode)
		require.ErrorIs(t, err, ErrOutOfRange)
		_, err = EncodeCoords(nil, Extent{Batch: 3, X: 1 << 21, Y: 1, Z: 1}, mode)
		require.ErrorIs(t, err, serialize.ErrTooLarge)

		codes, err = EncodeCoords(nil, ext, mode)
		require.NoError(t, err)
		require.Empty(t, codes)
		back, err = DecodeCoords(nil, ext, mode)
		require.NoError(t, err)
		require.Empty(t, back)
	}
}

// checkSorted verifies a SortBy result against a brute-force sort of
// (code, original row) pairs.
func checkSorted(t *testing.T, in, out *Tensor, perm []int32, mode SerialMode) {
	t.Helper()
	n := in.N()
	codes, err := EncodeCoords(in.Coords, in.Extent, mode)
	require.NoError(t, err)
	want := make([]int32, n)
	for i := range want {
		want[i] = int32(i)
	}
	slices.SortStableFunc(want, func(a, b int32) int { return cmp.Compare(codes[a], codes[b]) })
	require.Equal(t, want, perm)
	require.Equal(t, in.Extent, out.Extent)
	c := in.C()
	for j, p := range perm {
		require.Equal(t, in.Coords[4*p:4*p+4], out.Coords[4*j:4*j+4], "row %d", j)
		switch d := in.Feats.Data.(type) {
		case []float32:
			require.Equal(t, d[int(p)*c:int(p+1)*c], out.Feats.F32()[j*c:(j+1)*c])
		case []float64:
			require.Equal(t, d[int(p)*c:int(p+1)*c], out.Feats.F64()[j*c:(j+1)*c])
		case []int32:
			require.Equal(t, d[int(p)*c:int(p+1)*c], out.Feats.I32()[j*c:(j+1)*c])
		}
	}
	sortedCodes, err := EncodeCoords(out.Coords, out.Extent, mode)
	require.NoError(t, err)
	require.True(t, slices.IsSorted(sortedCodes))
	for j := 1; j < n; j++ {
		require.LessOrEqual(t, out.Coords[4*j-4], out.Coords[4*j], "batch is the major key")
	}
}

func TestSortBy(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, mode := range []SerialMode{ZOrder, Hilbert} {
		for i, in := range []*Tensor{
			randomTensor[float32](rng, Extent{Batch: 4, X: 33, Y: 17, Z: 9}, 1000, 3),
			randomTensor[float64](rng, Extent{Batch: 1, X: 1024, Y: 1024, Z: 1024}, 70000, 2),
			randomTensor[int32](rng, Extent{Batch: 2, X: 5, Y: 5, Z: 5}, 250, 1), // every site
			randomTensor[float32](rng, Extent{Batch: 2, X: 4, Y: 4, Z: 4}, 10, 0),
			{Coords: []int32{1, 2, 3, 0, 0, 0, 0, 1}, Extent: Extent{Batch: 2, X: 4, Y: 4, Z: 4}}, // no features
		} {
			coordsCopy := slices.Clone(in.Coords)
			out, perm, err := SortBy(in, mode)
			require.NoError(t, err, "case %d", i)
			require.Equal(t, coordsCopy, in.Coords, "the input is not modified")
			checkSorted(t, in, out, perm, mode)
			if in.Feats.IsZero() {
				require.True(t, out.Feats.IsZero())
			} else {
				require.Equal(t, in.Feats.Rows, out.Feats.Rows)
				require.Equal(t, in.Feats.Cols, out.Feats.Cols)
			}
			// Undo with the inverse permutation.
			inv, err := InversePermutation(perm)
			require.NoError(t, err)
			back, err := Permute(out, inv)
			require.NoError(t, err)
			require.Equal(t, in.Coords, back.Coords)
			require.Equal(t, in.Feats, back.Feats)
		}
	}
}

func TestSortByIsStableForDuplicates(t *testing.T) {
	ext := Extent{Batch: 2, X: 4, Y: 4, Z: 4}
	in := &Tensor{
		Coords: []int32{1, 1, 1, 1, 0, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1},
		Feats:  Matrix{Rows: 5, Cols: 1, Data: []float32{10, 20, 30, 40, 50}},
		Extent: ext,
	}
	for _, mode := range []SerialMode{ZOrder, Hilbert} {
		out, perm, err := SortBy(in, mode)
		require.NoError(t, err)
		require.Equal(t, []int32{3, 1, 0, 2, 4}, perm, "%v", mode)
		require.Equal(t, []float32{40, 20, 10, 30, 50}, out.Feats.F32())
	}
}

func TestSortByIsDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	in := randomTensor[float32](rng, Extent{Batch: 3, X: 300, Y: 300, Z: 300}, 200000, 4)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	var first *Tensor
	var firstPerm []int32
	for _, procs := range []int{1, 2, 5} {
		runtime.GOMAXPROCS(procs)
		out, perm, err := SortBy(in, Hilbert)
		require.NoError(t, err)
		if first == nil {
			first, firstPerm = out, perm
			continue
		}
		require.Equal(t, firstPerm, perm)
		require.Equal(t, first.Coords, out.Coords)
		require.Equal(t, first.Feats, out.Feats)
	}
}

func TestSortByErrors(t *testing.T) {
	ext := Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	f1 := Matrix{Rows: 1, Cols: 1, Data: []float32{1}}
	for i, tc := range []struct {
		in  *Tensor
		err error
	}{
		{in: nil, err: ErrShape},
		{in: &Tensor{Coords: []int32{0, 0, 0}, Extent: ext}, err: ErrShape},
		{in: &Tensor{Coords: []int32{0, 0, 0, 4}, Feats: f1, Extent: ext}, err: ErrOutOfRange},
		{in: &Tensor{Coords: []int32{-1, 0, 0, 0}, Feats: f1, Extent: ext}, err: ErrOutOfRange},
		{in: &Tensor{Coords: []int32{0, 0, 0, 0, 0, 0, 0, 1}, Feats: f1, Extent: ext}, err: ErrShape},
		{in: &Tensor{Coords: []int32{0, 0, 0, 0}, Feats: Matrix{Rows: 1, Cols: 1, Data: []float32{1, 2}}, Extent: ext}, err: ErrShape},
		{in: &Tensor{Coords: []int32{0, 0, 0, 0}, Feats: Matrix{Rows: 1, Cols: 1, Data: fakeStorage{}}, Extent: ext}, err: ErrDType},
		{in: &Tensor{Coords: []int32{0, 0, 0, 0}, Feats: Matrix{Rows: 1, Cols: 1, Data: []string{"a"}}, Extent: ext}, err: ErrDType},
		{in: &Tensor{Coords: []int32{0, 0, 0, 0}, Feats: f1, Extent: Extent{}}, err: serialize.ErrExtent},
	} {
		_, _, err := SortBy(tc.in, ZOrder)
		require.ErrorIs(t, err, tc.err, "case %d", i)
	}
	out, perm, err := SortBy(&Tensor{Coords: []int32{}, Feats: Matrix{Rows: 0, Cols: 3, Data: []float64{}}, Extent: ext}, Hilbert)
	require.NoError(t, err)
	require.Empty(t, perm)
	require.Equal(t, 0, out.N())
	require.Equal(t, 3, out.C())
}

type fakeStorage struct{}

func (fakeStorage) DType() DType { return Float16 }
func (fakeStorage) Len() int     { return 1 }

func TestPermuteAndInverse(t *testing.T) {
	ext := Extent{Batch: 1, X: 8, Y: 1, Z: 1}
	in := &Tensor{
		Coords: []int32{0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0},
		Feats:  Matrix{Rows: 3, Cols: 2, Data: []float64{0, 0.5, 1, 1.5, 2, 2.5}},
		Extent: ext,
	}
	out, err := Permute(in, []int32{2, 0, 1})
	require.NoError(t, err)
	require.Equal(t, []int32{0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}, out.Coords)
	require.Equal(t, []float64{2, 2.5, 0, 0.5, 1, 1.5}, out.Feats.F64())
	inv, err := InversePermutation([]int32{2, 0, 1})
	require.NoError(t, err)
	require.Equal(t, []int32{1, 2, 0}, inv)

	for i, tc := range []struct {
		perm []int32
		err  error
		msg  string
	}{
		{perm: []int32{0, 1}, err: ErrShape, msg: "length 2 for 3 rows"},
		{perm: []int32{0, 1, 3}, err: ErrOutOfRange, msg: "entry 2 is 3"},
		{perm: []int32{0, -1, 2}, err: ErrOutOfRange, msg: "entry 1 is -1"},
		{perm: []int32{0, 2, 2}, err: ErrDuplicate, msg: "entry 2 repeats row 2"},
	} {
		_, err := Permute(in, tc.perm)
		require.ErrorIs(t, err, tc.err, "case %d", i)
		require.ErrorContains(t, err, tc.msg, "case %d", i)
		_, err = PermuteRows(in.Feats, tc.perm)
		require.ErrorIs(t, err, tc.err, "case %d", i)
		if len(tc.perm) == 3 {
			_, err = InversePermutation(tc.perm)
			require.ErrorIs(t, err, tc.err, "case %d", i)
		}
	}
	m, err := PermuteRows(Matrix{Rows: 2, Cols: 2, Data: []int32{1, 2, 3, 4}}, []int32{1, 0})
	require.NoError(t, err)
	require.Equal(t, []int32{3, 4, 1, 2}, m.I32())
	_, err = PermuteRows(Matrix{Rows: 1, Cols: 1, Data: fakeStorage{}}, []int32{0})
	require.ErrorIs(t, err, ErrDType)
	_, err = Permute(nil, nil)
	require.ErrorIs(t, err, ErrShape)
	inv, err = InversePermutation(nil)
	require.NoError(t, err)
	require.Empty(t, inv)

	// A large random permutation and its inverse compose to the identity.
	rng := rand.New(rand.NewPCG(7, 8))
	perm := make([]int32, 100000)
	for i := range perm {
		perm[i] = int32(i)
	}
	rng.Shuffle(len(perm), func(i, j int) { perm[i], perm[j] = perm[j], perm[i] })
	inv, err = InversePermutation(perm)
	require.NoError(t, err)
	for j, p := range perm {
		require.Equal(t, int32(j), inv[p])
	}
	require.True(t, errors.Is(fmt.Errorf("x: %w", ErrDuplicate), ErrDuplicate))
}

func ExampleSortBy() {
	// Four voxels of a 4×4×4 grid, batch 1 listed first.
	coords := []int32{
		1, 0, 0, 0,
		0, 3, 3, 3,
		0, 0, 0, 1,
		0, 1, 0, 0,
	}
	feats, _ := MatrixOf(4, 1, []float32{10, 20, 30, 40})
	t, _ := NewTensor(coords, feats, Extent{Batch: 2, X: 4, Y: 4, Z: 4})
	for _, mode := range []SerialMode{ZOrder, Hilbert} {
		sorted, perm, _ := SortBy(t, mode)
		codes, _ := EncodeCoords(sorted.Coords, sorted.Extent, mode)
		fmt.Println(mode, "perm", perm, "codes", codes, "feats", sorted.Feats.F32())
	}
	// Output:
	// z_order perm [2 3 1 0] codes [1 4 63 64] feats [30 40 20 10]
	// hilbert perm [3 2 1 0] codes [3 7 45 64] feats [40 30 20 10]
}

func ExampleEncodeCoords() {
	ext := Extent{Batch: 2, X: 8, Y: 8, Z: 8} // 3 bits per axis, 1 batch bit
	codes, _ := EncodeCoords([]int32{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 7, 7, 7}, ext, ZOrder)
	fmt.Printf("%#o\n", codes)
	back, _ := DecodeCoords(codes, ext, ZOrder)
	fmt.Println(back)
	// Output:
	// [04 02 01 01777]
	// [0 1 0 0 0 0 1 0 0 0 0 1 1 7 7 7]
}

func BenchmarkSortBy(b *testing.B) {
	// 4.1M distinct sites of a 1024³ grid with 4 float32 features, in
	// random order.
	const n, c = 4_113_056, 4
	rng := rand.New(rand.NewPCG(9, 10))
	ext := Extent{Batch: 1, X: 1024, Y: 1024, Z: 1024}
	coords := make([]int32, 0, 4*n)
	seen := make(map[uint64]struct{}, n)
	for len(coords) < 4*n {
		k := rng.Uint64N(1 << 30)
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		coords = append(coords, 0, int32(k>>20), int32(k>>10&1023), int32(k&1023))
	}
	t := &Tensor{Coords: coords, Feats: NewMatrix[float32](n, c), Extent: ext}
	for _, mode := range []SerialMode{ZOrder, Hilbert} {
		b.Run(mode.String(), func(b *testing.B) {
			for b.Loop() {
				if _, _, err := SortBy(t, mode); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mrows/s")
		})
	}
}
