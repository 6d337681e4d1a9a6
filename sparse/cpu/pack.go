package cpu

// roundUp returns n rounded up to a multiple of m > 0.
func roundUp(n, m int) int { return (n + m - 1) / m * m }

// packForward packs the weight w [co, V·ci] for the forward GEMM: the
// per-tap matrices B_v [ci, co] with B_v[k, c] = w[c, v, k], cut into
// column panels of nr (zero padded), laid out [panel][v][k][nr]. Tap v of
// panel j starts at ((j·V + v)·ci)·nr, and the taps of one panel are
// contiguous, so panel j is also the [V·ci, nr] matrix of the im2col GEMM.
func packForward[T Float](w []T, co, V, ci, nr int) []T {
	np := (co + nr - 1) / nr
	bp := make([]T, np*V*ci*nr)
	for c := range co {
		j, cc := c/nr, c%nr
		row := w[c*V*ci : (c+1)*V*ci]
		dst := bp[j*V*ci*nr:]
		for vk, x := range row {
			dst[vk*nr+cc] = x
		}
	}
	return bp
}

// packInputGrad packs w [co, V·ci] for the input-gradient GEMM: the per-tap
// matrices B_v [co, ci] with B_v[k, c] = w[k, v, c], in the layout of
// packForward with the roles of ci and co swapped.
func packInputGrad[T Float](w []T, co, V, ci, nr int) []T {
	np := (ci + nr - 1) / nr
	bp := make([]T, np*V*co*nr)
	for k := range co {
		for v := range V {
			src := w[(k*V+v)*ci : (k*V+v+1)*ci]
			for c, x := range src {
				j, cc := c/nr, c%nr
				bp[((j*V+v)*co+k)*nr+cc] = x
			}
		}
	}
	return bp
}
