package cudaext

import "math"

// Float32ToHalfBits rounds f to IEEE binary16 (round to nearest even) and
// returns its bits. Overflow gives ±Inf, NaN a quiet NaN.
func Float32ToHalfBits(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		s := uint(126 - exp) // value = (1.man) · 2^-24 · 2^-s … as a subnormal count
		if s > 24 {
			return sign
		}
		full := man | 0x800000
		m := full >> s
		rem := full & (1<<s - 1)
		half := uint32(1) << (s - 1)
		if rem > half || (rem == half && m&1 == 1) {
			m++
		}
		return sign | uint16(m)
	}
	m := man >> 13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && m&1 == 1) {
		m++
	}
	return sign | (uint16(e)<<10 + uint16(m)) // a mantissa carry bumps the exponent
}

// HalfBitsToFloat32 returns the value of IEEE binary16 bits h (exact).
func HalfBitsToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		v := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

// Float32ToBFloat16Bits rounds f to bfloat16 (round to nearest even) and
// returns its bits. NaN gives a quiet NaN.
func Float32ToBFloat16Bits(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7f800000 == 0x7f800000 && b&0x7fffff != 0 {
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BFloat16BitsToFloat32 returns the value of bfloat16 bits h (exact).
func BFloat16BitsToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
