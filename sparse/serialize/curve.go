package serialize

// spread3 moves bit i of the low 21 bits of v to bit 3i.
func spread3(v uint32) uint64 {
	x := uint64(v) & 0x1fffff
	x = (x | x<<32) & 0x001f00000000ffff
	x = (x | x<<16) & 0x001f0000ff0000ff
	x = (x | x<<8) & 0x100f00f00f00f00f
	x = (x | x<<4) & 0x10c30c30c30c30c3
	x = (x | x<<2) & 0x1249249249249249
	return x
}

// compact3 is the inverse of spread3: it gathers bits 3i of v into bit i.
func compact3(v uint64) uint32 {
	x := v & 0x1249249249249249
	x = (x | x>>2) & 0x10c30c30c30c30c3
	x = (x | x>>4) & 0x100f00f00f00f00f
	x = (x | x>>8) & 0x001f0000ff0000ff
	x = (x | x>>16) & 0x001f00000000ffff
	x = (x | x>>32) & 0x1fffff
	return uint32(x)
}

// interleave3 returns the Morton code of (x, y, z): bit i of x, y, z goes to
// bit 3i+2, 3i+1, 3i.
func interleave3(x, y, z uint32) uint64 {
	return spread3(x)<<2 | spread3(y)<<1 | spread3(z)
}

// deinterleave3 is the inverse of interleave3.
func deinterleave3(code uint64) (x, y, z uint32) {
	return compact3(code >> 2), compact3(code >> 1), compact3(code)
}
