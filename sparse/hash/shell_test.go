package hash

import "math"

// shellCoords returns the sphere shell of FlexGEMM's benchmarks as flat
// [N, 4] coordinates sorted by (batch, x, y, z): voxel (i, j, k) of a res³
// grid is active iff its centre lies at distance d ∈ [res/2 − 1.25, res/2]
// from the grid centre. The test is exact in integers: with u = 2i+1−res
// (and likewise v, w), 16·d² = 4(u² + v² + w²).
func shellCoords(res, batch int) []int32 {
	lo := (2*res - 5) * (2*res - 5)
	hi := 4 * res * res
	var out []int32
	for b := range batch {
		for i := range res {
			u := 2*i + 1 - res
			for j := range res {
				v := 2*j + 1 - res
				a := 4 * (u*u + v*v)
				if a > hi {
					continue
				}
				// wMin ≤ |w| ≤ wMax bounds the candidates (with a margin
				// for rounding); the exact integer test decides.
				wMax := int(math.Sqrt(float64(hi-a)/4)) + 2
				wMin := 0
				if lo > a {
					wMin = max(0, int(math.Sqrt(float64(lo-a)/4))-2)
				}
				for k := max(0, (res-1-wMax)/2-1); k <= min(res-1, (res-1+wMax)/2+1); k++ {
					w := 2*k + 1 - res
					if w < 0 && -w < wMin {
						// Jump over the hollow inside: to the first k
						// with w ≥ −wMin… and on to w ≥ wMin.
						k = max(k, (res-1+wMin)/2-1)
						continue
					}
					if s := a + 4*w*w; s >= lo && s <= hi {
						out = append(out, int32(b), int32(i), int32(j), int32(k))
					}
				}
			}
		}
	}
	return out
}
