package cpu

import "fmt"

// gatherRows copies rows of src into dst:
//
//	for r, i := range idx:
//		dst[r·dstStride : r·dstStride+width] = src[i·srcStride+srcOff : …+width]   (i ≥ 0)
//		dst[r·dstStride : r·dstStride+width] = 0                                    (i < 0)
//
// It panics (an internal bug) if a row would fall outside dst or src.
func gatherRows[T Float](dst []T, dstStride int, src []T, srcStride, srcOff int, idx []int32, width int) {
	n := len(idx)
	if n == 0 || width <= 0 {
		return
	}
	if (n-1)*dstStride+width > len(dst) || srcOff < 0 || srcOff+width > srcStride {
		panic(fmt.Sprintf("cpu: gather of %d rows of %d into %d (stride %d) from stride %d offset %d", n, width, len(dst), dstStride, srcStride, srcOff))
	}
	rowsIn := int32(len(src) / srcStride)
	for _, i := range idx {
		if i >= rowsIn {
			panic(fmt.Sprintf("cpu: gather of row %d of %d", i, rowsIn))
		}
	}
	if rowsIn > 0 && gatherAsm(dst, dstStride, src[srcOff:], srcStride, idx, width) {
		return
	}
	for r, i := range idx {
		d := dst[r*dstStride : r*dstStride+width]
		if i < 0 {
			clear(d)
			continue
		}
		s := int(i)*srcStride + srcOff
		copy(d, src[s:s+width])
	}
}
