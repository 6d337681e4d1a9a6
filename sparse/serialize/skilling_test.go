package serialize

// The loop form of Skilling's transform, the reference that the table-driven
// hilbertEncode/hilbertDecode are checked against.

// hilbertTranspose converts the axes (x, y, z) of an n-bit grid into the
// "transposed" Hilbert index of Skilling (2004), AxesToTranspose: the bits
// of the Hilbert index, read most significant first, are bit n−1 of the
// three outputs in order, then bit n−2, and so on.
func hilbertTranspose(n int, x, y, z uint32) (uint32, uint32, uint32) {
	if n <= 1 {
		// One bit per axis: the undo loop is empty and the final
		// correction is zero, so only the Gray encoding remains.
		y ^= x
		z ^= y
		return x, y, z
	}
	p := [3]uint32{x, y, z}
	// Inverse undo: from the top bit down, reflect or exchange the lower
	// bits so that every sub-cube is traversed in a canonical orientation.
	for q := uint32(1) << (n - 1); q > 1; q >>= 1 {
		low := q - 1
		for i := range 3 {
			if p[i]&q != 0 {
				p[0] ^= low
			} else {
				t := (p[0] ^ p[i]) & low
				p[0] ^= t
				p[i] ^= t
			}
		}
	}
	// Gray encode.
	p[1] ^= p[0]
	p[2] ^= p[1]
	var t uint32
	for q := uint32(1) << (n - 1); q > 1; q >>= 1 {
		if p[2]&q != 0 {
			t ^= q - 1
		}
	}
	return p[0] ^ t, p[1] ^ t, p[2] ^ t
}

// hilbertUntranspose is the inverse of hilbertTranspose (Skilling's
// TransposeToAxes).
func hilbertUntranspose(n int, x, y, z uint32) (uint32, uint32, uint32) {
	p := [3]uint32{x, y, z}
	// Gray decode by H ^ (H/2).
	t := p[2] >> 1
	p[2] ^= p[1]
	p[1] ^= p[0]
	p[0] ^= t
	// Undo excess work, from the second lowest bit up.
	for q := uint32(2); n > 1 && q != uint32(1)<<n; q <<= 1 {
		low := q - 1
		for i := 2; i >= 0; i-- {
			if p[i]&q != 0 {
				p[0] ^= low
			} else {
				t := (p[0] ^ p[i]) & low
				p[0] ^= t
				p[i] ^= t
			}
		}
	}
	return p[0], p[1], p[2]
}
