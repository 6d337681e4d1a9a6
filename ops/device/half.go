package device

import (
	"math"

	"github.com/flexgemm-go/flexgemm/sparse"
)

// RoundTo returns v rounded to the nearest value of dtype dt (ties to
// even), as a float32: the value a device buffer of that dtype stores.
// Float32 and other dtypes return v unchanged.
func RoundTo(dt sparse.DType, v float32) float32 {
	switch dt {
	case sparse.BFloat16:
		return bf16ToF32(f32ToBF16(v))
	case sparse.Float16:
		return f16ToF32(f32ToF16(v))
	}
	return v
}

// f32ToBF16 rounds to bfloat16 bits (nearest even; NaN stays NaN).
func f32ToBF16(v float32) uint16 {
	b := math.Float32bits(v)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it quiet
		return uint16(b>>16) | 0x0040
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

func bf16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// f32ToF16 rounds to IEEE binary16 bits (nearest even, subnormals,
// overflow to ±Inf, NaN stays NaN).
func f32ToF16(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // biased half exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		if e < -10 { // below half the smallest subnormal
			return sign
		}
		m := man | 0x800000
		shift := uint(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint16(e)<<10 | uint16(man>>13)
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent is the correct rounding (up to Inf)
	}
	return sign | h
}

func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		v := float32(man) / (1 << 24)
		if sign != 0 {
			return -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
}
