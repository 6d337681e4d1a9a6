//go:build cudaext

package cudaext

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// tf32Kept is the mask of the float32 bits a tf32 product reads.
const tf32Kept = 0xffffe000

// TestTF32OperandKernels checks the two kernels that clear the bits tf32
// products ignore against the host: the copy (spconv_tf32_operand) at
// lengths that do and do not fill its 16-byte accesses, and the weight
// transpose (spconv_transpose_w_tf32); and that tf32Operand points the job
// at the copy, and declines to copy past tf32ClearMaxBytes, for other
// maths and for empty jobs.
func TestTF32OperandKernels(t *testing.T) {
	was := tf32ClearedOperands.Load()
	defer tf32ClearedOperands.Store(was)
	tf32ClearedOperands.Store(true)
	rng := rand.New(rand.NewPCG(53, 1))
	d := gpu.d
	for _, n := range []int64{1, 3, 4, 5, 1027, 27 * 72 * 136} {
		src := synth.Uniform[float32](rng, int(n))
		w := dev(t, 1, int(n), src, sparse.Float32)
		wb, err := gpu.buffer(w, "w")
		require.NoError(t, err)
		var got []uint32
		j := gatherJob{math: kernels.TF32, w: wb.ptr, M: 1, N: 1}
		require.NoError(t, d.do(func() error {
			c, err := gpu.tf32Operand(&j, n)
			if err != nil || c.ptr == 0 {
				return err
			}
			defer d.freeTemp(c)
			got, err = download[uint32](d, c.ptr, int(n))
			return err
		}))
		require.Len(t, got, int(n), "n %d: no copy", n)
		require.NotEqual(t, wb.ptr, j.w, "n %d: the job still multiplies the weight as stored", n)
		lowBits := false
		for i, v := range src {
			b := math.Float32bits(v)
			lowBits = lowBits || b&^tf32Kept != 0
			require.Equal(t, b&tf32Kept, got[i], "n %d: element %d", n, i)
		}
		require.True(t, lowBits || n < 4, "n %d: the inputs never set the cleared bits", n)
		gpu.Free(w)
	}
	// No copy (the job keeps its weight) past tf32ClearMaxBytes, for other
	// maths, and with nothing to compute.
	for _, j := range []gatherJob{
		{math: kernels.TF32, w: d.zeroPage, M: 1, N: 1},
		{math: kernels.F32, w: d.zeroPage, M: 1, N: 1},
		{math: kernels.TF32, w: d.zeroPage, M: 0, N: 1},
	} {
		n := int64(4)
		if j.math == kernels.TF32 && j.M > 0 {
			n = tf32ClearMaxBytes/4 + 1
		}
		var c rawBuf
		require.NoError(t, d.do(func() error {
			var err error
			c, err = gpu.tf32Operand(&j, n)
			return err
		}))
		require.Zero(t, c.ptr, "%v M %d: a copy of %d values", j.math, j.M, n)
		require.Equal(t, d.zeroPage, j.w, "%v M %d", j.math, j.M)
	}
	// The transpose [Co, V, Ci] -> [Ci, V, Co], cleared for TF32 only.
	const co, V, ci = 40, 27, 72
	src := synth.Uniform[float32](rng, co*V*ci)
	w := dev(t, co, V*ci, src, sparse.Float32)
	defer gpu.Free(w)
	wb, err := gpu.buffer(w, "w")
	require.NoError(t, err)
	for _, mth := range []kernels.Math{kernels.TF32, kernels.F32} {
		var got []uint32
		require.NoError(t, d.do(func() error {
			wt, err := gpu.transposeW(wb, co, V, ci, mth)
			if err != nil {
				return err
			}
			defer d.freeTemp(wt)
			got, err = download[uint32](d, wt.ptr, co*V*ci)
			return err
		}))
		keep := uint32(math.MaxUint32)
		if mth == kernels.TF32 {
			keep = tf32Kept
		}
		for o := range co {
			for v := range V {
				for c := range ci {
					want := math.Float32bits(src[(o*V+v)*ci+c]) & keep
					require.Equal(t, want, got[(c*V+v)*co+o], "%v: [%d, %d, %d]", mth, o, v, c)
				}
			}
		}
	}
}

// TestTF32ClearedOperands checks that clearing the weight's ignored bits
// changes no tf32 result: every tile with tf32 kernels, every algorithm,
// forward and input gradient (as stored, transposed, and mirrored), with
// EnvTF32Clear's switch on and off, bit for bit. TestConvSweep checks the
// default (on) against the float64 reference.
func TestTF32ClearedOperands(t *testing.T) {
	was := tf32ClearedOperands.Load()
	defer tf32ClearedOperands.Store(was)
	gpu.SetTF32(true)
	defer gpu.SetTF32(false)
	rng := rand.New(rand.NewPCG(53, 2))
	ok := mapOK(t)
	coords, ext := synth.SphereShell(24, 1)
	rext := grid.Extent{Batch: 2, X: 40, Y: 36, Z: 32}
	scenes := []scene{
		{"shell24-subm3", ok(kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}))},
		{"random-strided-k3s2", ok(kmap.NewStrided(synth.RandomScene(rng, rext, 0.4), rext, grid.Cube(3, 2, 1, 1), nil))},
	}
	for _, sc := range scenes {
		V := sc.m.V()
		for _, ch := range [][2]int{{72, 136}, {256, 256}} {
			ci, co := ch[0], ch[1]
			x := dev(t, sc.m.NIn, ci, synth.Uniform[float32](rng, sc.m.NIn*ci), sparse.Float32)
			w := dev(t, co, V*ci, synth.Uniform[float32](rng, co*V*ci), sparse.Float32)
			dy := dev(t, sc.m.NOut, co, synth.Uniform[float32](rng, sc.m.NOut*co), sparse.Float32)
			tiles := append([]string{""}, tileNames(testTiles(kernels.TF32), kernels.TF32)...)
			for _, tile := range tiles {
				for _, alg := range sparse.Algorithms {
					o := Options{ConvOptions: sparse.ConvOptions{Algorithm: alg}, Tile: tile}
					name := fmt.Sprintf("%s/ci%d-co%d/%v/%s", sc.name, ci, co, alg, tile)
					run := func(clear bool) [2][]float32 {
						tf32ClearedOperands.Store(clear)
						return forwardAndInputGrad(t, sc.m, x, w, sparse.Matrix{}, dy, o, true, name)
					}
					got, want := run(true), run(false)
					for dir := range got {
						requireSameBits(t, want[dir], got[dir], fmt.Sprintf("%s: direction %d: cleared against stored", name, dir))
					}
				}
			}
			gpu.Free(x, w, dy)
		}
		gpu.ReleaseMap(sc.m)
	}
}

// tileNames returns the names of the tiles that support mth.
func tileNames(tiles []kernels.Tile, mth kernels.Math) []string {
	var out []string
	for _, t := range tiles {
		if t.Supports(mth) {
			out = append(out, t.Name())
		}
	}
	return out
}
