package serialize

// Table-driven Hilbert curve.
//
// Skilling's AxesToTranspose (hilbertTranspose) walks the bit levels from
// the top. At each level it reads the three coordinate bits, as changed by
// the levels above, and then reflects or exchanges the axes of every lower
// level. Those changes compose into one signed permutation of the three
// axes (one of 48), applied alike to all lower levels. The Gray code and
// final correction that follow are per level too: output triple j is the
// Gray code of level j's triple, XOR the parity of the last Gray bit over
// all higher levels. So the whole transform is a finite-state machine that
// reads one bit triple per level, most significant first, with state
// (signed permutation, parity), and emits one code triple. The tables below
// are built once from that description; tests check them against the
// loop-based functions bit for bit.

// A triple holds one bit level of (x, y, z) as x<<2 | y<<1 | z, so axis a
// is bit 2−a.
func tripleBit(t uint8, a int) uint8 { return t >> (2 - a) & 1 }

func tripleSet(t uint8, a int, v uint8) uint8 {
	return t&^(1<<(2-a)) | v<<(2-a)
}

// action is a signed axis permutation, stored as its effect on each triple.
type action [8]uint8

// then returns the action of a followed by op.
func (a action) then(op func(uint8) uint8) action {
	var out action
	for t := range a {
		out[t] = op(a[t])
	}
	return out
}

func (a action) inverse() action {
	var out action
	for t, u := range a {
		out[u] = uint8(t)
	}
	return out
}

// hilbertEnc and hilbertDec are the one-level machine tables, indexed by
// state·8 + triple (state 0 is the start); an entry holds
// next state << 3 | output triple.
var hilbertEnc, hilbertDec []uint16

func buildHilbertTables() (enc, dec []uint16) {
	var identity action
	for t := range identity {
		identity[t] = uint8(t)
	}
	// afterLevel returns the lower-level action once a level has read the
	// (already transformed) triple u: for each axis i in order, invert axis
	// 0 if bit i is set, else exchange axes 0 and i.
	afterLevel := func(g action, u uint8) action {
		for i := range 3 {
			if tripleBit(u, i) != 0 {
				g = g.then(func(t uint8) uint8 { return t ^ 4 })
			} else if i != 0 {
				g = g.then(func(t uint8) uint8 {
					a, b := tripleBit(t, 0), tripleBit(t, i)
					return tripleSet(tripleSet(t, 0, b), i, a)
				})
			}
		}
		return g
	}
	// Number the reachable actions from the identity in breadth-first
	// order, so state 0 is (identity, parity 0).
	ids := map[action]int{identity: 0}
	acts := []action{identity}
	for k := 0; k < len(acts); k++ {
		for u := range uint8(8) {
			next := afterLevel(acts[k], u)
			if _, ok := ids[next]; !ok {
				ids[next] = len(acts)
				acts = append(acts, next)
			}
		}
	}
	states := 2 * len(acts) // state = action id·2 + parity
	enc = make([]uint16, states*8)
	dec = make([]uint16, states*8)
	for gi, g := range acts {
		inv := g.inverse()
		for p := range uint8(2) {
			s := 2*gi + int(p)
			for v := range uint8(8) {
				u := g[v]
				u0, u1, u2 := tripleBit(u, 0), tripleBit(u, 1), tripleBit(u, 2)
				g0, g1, g2 := u0, u0^u1, u0^u1^u2 // Gray code across axes
				w := (g0^p)<<2 | (g1^p)<<1 | (g2 ^ p)
				next := uint16(2*ids[afterLevel(g, u)] + int(p^g2))
				enc[s*8+int(v)] = next<<3 | uint16(w)
				dec[s*8+int(w)] = next<<3 | uint16(inv[u])
			}
		}
	}
	return enc, dec
}

// hilbertEnc2 and hilbertDec2 run two levels per lookup: they are indexed
// by state·64 + two triples (higher level in the high 3 bits), and an entry
// holds next state << 6 | two output triples.
var hilbertEnc2, hilbertDec2 []uint16

func init() {
	hilbertEnc, hilbertDec = buildHilbertTables()
	hilbertEnc2 = pairTable(hilbertEnc)
	hilbertDec2 = pairTable(hilbertDec)
}

func pairTable(one []uint16) []uint16 {
	states := len(one) / 8
	two := make([]uint16, states*64)
	for s := range states {
		for in := range 64 {
			e1 := one[s*8+in>>3]
			e2 := one[int(e1>>3)*8+in&7]
			two[s*64+in] = e2>>3<<6 | (e1&7)<<3 | e2&7
		}
	}
	return two
}

// hilbertEncode returns the 3n-bit Hilbert index of (x, y, z) on an n-bit
// grid: the machine reads the Morton code of (x, y, z) two levels (six bits)
// at a time, from the top.
func hilbertEncode(n int, x, y, z uint32) uint64 {
	m := interleave3(x, y, z)
	var code uint64
	s := 0
	j := 3 * n // bits left to read
	if n&1 != 0 {
		j -= 3
		e := hilbertEnc[int(m>>j)&7]
		code = uint64(e & 7)
		s = int(e >> 3)
	}
	for j > 0 {
		j -= 6
		e := hilbertEnc2[s<<6|int(m>>j)&63]
		code = code<<6 | uint64(e&63)
		s = int(e >> 6)
	}
	return code
}

// hilbertDecode is the inverse of hilbertEncode for a 3n-bit index.
func hilbertDecode(n int, code uint64) (x, y, z uint32) {
	var m uint64
	s := 0
	j := 3 * n
	if n&1 != 0 {
		j -= 3
		e := hilbertDec[int(code>>j)&7]
		m = uint64(e & 7)
		s = int(e >> 3)
	}
	for j > 0 {
		j -= 6
		e := hilbertDec2[s<<6|int(code>>j)&63]
		m = m<<6 | uint64(e&63)
		s = int(e >> 6)
	}
	return deinterleave3(m)
}
