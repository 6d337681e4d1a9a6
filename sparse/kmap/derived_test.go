package kmap

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkDerived verifies every derived structure of m against definitions
// computed here from m.Nbr alone.
func checkDerived(t *testing.T, m *Map) {
	t.Helper()
	V := m.V()

	// Reverse is the exact inverse of Nbr.
	rev := m.Reverse()
	require.Len(t, rev, m.NIn*V)
	want := slices.Repeat([]int32{-1}, m.NIn*V)
	for o := range m.NOut {
		for v := range V {
			if i := m.Nbr[o*V+v]; i >= 0 {
				require.Equal(t, int32(-1), want[int(i)*V+v], "two outputs share input %d at tap %d", i, v)
				want[int(i)*V+v] = int32(o)
			}
		}
	}
	require.Equal(t, want, rev)

	// Pairs list exactly the entries of Nbr, by tap, outputs ascending.
	p := m.Pairs()
	require.Len(t, p.Seg, V+1)
	require.Zero(t, p.Seg[0])
	var count int64
	for v := range V {
		var in, out []int32
		for o := range m.NOut {
			if i := m.Nbr[o*V+v]; i >= 0 {
				in, out = append(in, i), append(out, int32(o))
			}
		}
		count += int64(len(in))
		require.Equal(t, count, p.Seg[v+1])
		require.Equal(t, in, nonNil(p.In[p.Seg[v]:p.Seg[v+1]]))
		require.Equal(t, out, nonNil(p.Out[p.Seg[v]:p.Seg[v+1]]))
	}
	require.Equal(t, count, p.Count())

	checkMasked(t, m.Masked(), m.Nbr, m.NOut, V)
	checkMasked(t, m.ReverseMasked(), rev, m.NIn, V)

	st := m.Stats(8)
	require.Equal(t, Stats{NIn: m.NIn, NOut: m.NOut, V: V, Pairs: count, Density: st.Density,
		TileRows: 8, MaskedWork: m.Masked().Tiles(8).Work, Padding: st.Padding}, st)
	if m.NOut > 0 {
		require.InDelta(t, float64(count)/float64(m.NOut*V), st.Density, 1e-12)
	}
	if count > 0 {
		require.GreaterOrEqual(t, st.Padding, 1.0)
		require.InDelta(t, float64(st.MaskedWork)/float64(count), st.Padding, 1e-12)
	}
}

func nonNil(s []int32) []int32 {
	if len(s) == 0 {
		return nil
	}
	return s
}

// grayRank returns the rank of Gray code g in the reflected binary Gray
// sequence by its definition: the b with b ⊕ (b >> 1) = g, computed as the
// XOR of g >> s for all s, then checked against the definition.
func grayRank(t *testing.T, g *big.Int) *big.Int {
	b := new(big.Int)
	for s := new(big.Int).Set(g); s.Sign() != 0; s.Rsh(s, 1) {
		b.Xor(b, s)
	}
	back := new(big.Int).Xor(b, new(big.Int).Rsh(b, 1))
	require.Zero(t, back.Cmp(g), "rank %v of %v does not encode back", b, g)
	return b
}

// checkMasked verifies masks, the stable Gray order, the masked order and
// tile unions of a table with rows rows.
func checkMasked(t *testing.T, ms *Masked, table []int32, rows, V int) {
	t.Helper()
	require.Equal(t, V, ms.V)
	require.Equal(t, (V+63)/64, ms.Words)
	W := ms.Words
	require.Len(t, ms.Mask, rows*W)
	// KeyTaps: a permutation of the taps, the least even splits of the
	// rows first, ties in tap order.
	count := make([]int, V)
	for r := range rows {
		for v := range V {
			if table[r*V+v] >= 0 {
				count[v]++
			}
		}
	}
	uneven := func(v int32) int {
		d := 2*count[v] - rows
		if d < 0 {
			return -d
		}
		return d
	}
	require.Len(t, ms.KeyTaps, V)
	if rows > BalancedKeyMaxRows {
		uneven = func(int32) int { return 0 } // table order
	}
	bit := make([]int, V) // bit[v]: the key bit of tap v
	for v := range bit {
		bit[v] = -1
	}
	for b, v := range ms.KeyTaps {
		require.True(t, v >= 0 && int(v) < V && bit[v] < 0, "KeyTaps[%d] = %d: not a new tap", b, v)
		bit[v] = b
		if b > 0 {
			u := ms.KeyTaps[b-1]
			require.True(t, uneven(u) > uneven(v) || (uneven(u) == uneven(v) && u < v),
				"KeyTaps[%d] = %d (%d rows of %d) before KeyTaps[%d] = %d (%d rows)", b-1, u, count[u], rows, b, v, count[v])
		}
	}
	ranks := make([]*big.Int, rows)
	for r := range rows {
		g := new(big.Int)
		for v := range V {
			has := table[r*V+v] >= 0
			require.Equal(t, has, ms.Mask[r*W+v/64]>>(v%64)&1 == 1, "row %d tap %d", r, v)
			if has {
				g.SetBit(g, bit[v], 1)
			}
		}
		ranks[r] = grayRank(t, g)
	}
	// Gray is a permutation sorted by rank, ties by row index.
	require.Len(t, ms.Gray, rows)
	seen := make([]bool, rows)
	for j, r := range ms.Gray {
		require.False(t, seen[r], "row %d twice in Gray", r)
		seen[r] = true
		if j > 0 {
			q := ms.Gray[j-1]
			c := ranks[q].Cmp(ranks[r])
			require.True(t, c < 0 || (c == 0 && q < r), "Gray[%d]=%d (rank %v) before Gray[%d]=%d (rank %v)", j-1, q, ranks[q], j, r, ranks[r])
		}
	}
	checkRegrouped(t, ms)
	// Tiles: the union of the masks of each tile, ascending taps.
	for _, tr := range []int{1, 3, 8, 64, 0} {
		tl := ms.Tiles(tr)
		size := max(tr, 1)
		require.Equal(t, size, tl.Rows)
		nt := (rows + size - 1) / size
		require.Len(t, tl.Seg, nt+1)
		var work int64
		for tile := range nt {
			var taps []int32
			lo, hi := tile*size, min(rows, tile*size+size)
			for v := range V {
				for _, r := range ms.Order[lo:hi] {
					if table[int(r)*V+v] >= 0 {
						taps = append(taps, int32(v))
						break
					}
				}
			}
			require.Equal(t, taps, nonNil(tl.Taps[tl.Seg[tile]:tl.Seg[tile+1]]), "tile %d of %d rows", tile, size)
			work += int64(len(taps) * (hi - lo))
		}
		require.Equal(t, work, tl.Work)
		require.Same(t, tl, ms.Tiles(tr), "tiles are cached")
	}
}

func TestGrayToBinaryExhaustive(t *testing.T) {
	// Every Gray code of up to 12 bits: the rank of g(b) = b ⊕ (b >> 1) is b.
	for b := range uint64(1 << 12) {
		g := []uint64{b ^ b>>1}
		out := make([]uint64, 1)
		grayToBinary(g, out)
		require.Equal(t, b, out[0])
	}
}

func TestGrayToBinaryMultiWord(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, words := range []int{1, 2, 3, 5} {
		for range 500 {
			// A random rank b of words·64 bits (some sparse, some dense),
			// its Gray code by definition, and back.
			b := new(big.Int)
			bw := make([]uint64, words)
			for w := range bw {
				switch rng.IntN(4) {
				case 0:
				case 1:
					bw[w] = ^uint64(0)
				default:
					bw[w] = rng.Uint64()
				}
				b.Or(b, new(big.Int).Lsh(new(big.Int).SetUint64(bw[w]), uint(64*w)))
			}
			g := new(big.Int).Xor(b, new(big.Int).Rsh(b, 1))
			gw := make([]uint64, words)
			for w := range gw {
				gw[w] = new(big.Int).Rsh(g, uint(64*w)).Uint64()
			}
			out := make([]uint64, words)
			grayToBinary(gw, out)
			require.Equal(t, bw, out)
		}
	}
}

func TestGrayKeyTapOrderByRows(t *testing.T) {
	// Either side of BalancedKeyMaxRows, with taps present in 1/8, 1/2 and
	// 3/4 of the rows: KeyTaps's order up to it, table order above.
	for _, tc := range []struct {
		rows int
		want []int32
	}{
		{BalancedKeyMaxRows, []int32{0, 2, 1}},
		{BalancedKeyMaxRows + 1, []int32{0, 1, 2}},
	} {
		t.Run(fmt.Sprint(tc.rows), func(t *testing.T) {
			const V = 3
			rng := rand.New(rand.NewPCG(uint64(tc.rows), 3))
			table := make([]int32, tc.rows*V)
			for r := range tc.rows {
				for v, p := range []int{1, 4, 6} {
					table[r*V+v] = -1
					if rng.IntN(8) < p {
						table[r*V+v] = 0
					}
				}
			}
			ms := newMasked(table, tc.rows, V)
			require.Equal(t, tc.want, ms.KeyTaps)
			checkMasked(t, ms, table, tc.rows, V)
		})
	}
}

func TestGrayOrderMultiWord(t *testing.T) {
	// Hand-made tables with V = 130 (3 words), including equal masks to
	// check stability and masks that differ only in the top word.
	rng := rand.New(rand.NewPCG(9, 10))
	const V, rows = 130, 300
	table := make([]int32, rows*V)
	for r := range rows {
		mode := rng.IntN(4)
		for v := range V {
			table[r*V+v] = -1
			switch {
			case mode == 0 && v == 129:
				table[r*V+v] = 0
			case mode == 1 && (v == 63 || v == 64):
				table[r*V+v] = 0
			case mode >= 2 && rng.IntN(3) == 0:
				table[r*V+v] = 0
			}
		}
	}
	checkMasked(t, newMasked(table, rows, V), table, rows, V)
}

func TestRadixSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{0, 1, 2, 63, 64, 65, 1000, 200_000} {
		for _, nbits := range []int{1, 5, 11, 12, 27, 33, 64} {
			for _, par := range []bool{false, true} {
				keys := make([]uint64, n)
				vals := make([]int32, n)
				for i := range keys {
					keys[i] = rng.Uint64() >> (64 - nbits)
					if rng.IntN(4) == 0 && i > 0 {
						keys[i] = keys[rng.IntN(i)] // repeats test stability
					}
					vals[i] = int32(i)
				}
				type kv struct {
					k uint64
					v int32
				}
				want := make([]kv, n)
				for i := range want {
					want[i] = kv{keys[i], vals[i]}
				}
				slices.SortStableFunc(want, func(a, b kv) int {
					switch {
					case a.k < b.k:
						return -1
					case a.k > b.k:
						return 1
					}
					return 0
				})
				wantKeys := make([]uint64, n)
				wantVals := make([]int32, n)
				for i, e := range want {
					wantKeys[i], wantVals[i] = e.k, e.v
				}
				onlyKeys := slices.Clone(keys)
				radixSort(keys, vals, nbits, par)
				require.Equal(t, wantKeys, keys)
				require.Equal(t, wantVals, vals)
				radixSort(onlyKeys, nil, nbits, par)
				require.Equal(t, wantKeys, onlyKeys)
			}
		}
	}
}

func TestSeek(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	keys := make([]uint64, 5000)
	for i := range keys {
		keys[i] = uint64(rng.IntN(40000))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for range 20000 {
		p := rng.IntN(len(keys) + 1)
		key := uint64(rng.IntN(41000))
		want := p
		for want < len(keys) && keys[want] < key {
			want++
		}
		require.Equal(t, want, seek(keys, p, key), "p=%d key=%d", p, key)
	}
}

func TestKeyTaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count []int64
		rows  int
		want  []int32
	}{
		{"empty", nil, 0, []int32{}},
		{"one tap", []int64{3}, 5, []int32{0}},
		// Tap 0 in every row (uneven 4), tap 2 in one (2), tap 1 in half (0).
		{"by unevenness", []int64{4, 2, 1}, 4, []int32{0, 2, 1}},
		// Tap 1 in no row and tap 2 in every row split as unevenly (tap order),
		// then tap 3 in one row of four, tap 0 in half.
		{"ties in tap order", []int64{2, 0, 4, 1}, 4, []int32{1, 2, 3, 0}},
		// Counts past 2^31 (the difference is taken in 64 bits): tap 0 in half
		// the rows, tap 1 in three quarters.
		{"large", []int64{1 << 40, 3 << 39}, 1 << 41, []int32{1, 0}},
		// The benchmark's 3×3×3 shells: the centre, then the corners, the
		// faces and the edges.
		{"shell classes", []int64{35, 43, 35, 43, 59, 43, 35, 43, 35, 43, 59, 43, 59, 100, 59, 43, 59, 43, 35, 43, 35, 43, 59, 43, 35, 43, 35}, 100,
			[]int32{13, 0, 2, 6, 8, 18, 20, 24, 26, 4, 10, 12, 14, 16, 22, 1, 3, 5, 7, 9, 11, 15, 17, 19, 21, 23, 25}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, KeyTaps(tc.count, tc.rows))
		})
	}
}
