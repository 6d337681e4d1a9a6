package ops

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/flexgemm-go/flexgemm/sparse"
)

// refVoxelNorm is the float64 textbook formula, written independently of
// the op (two passes, one channel at a time).
func refVoxelNorm(x, gamma, beta []float64, n, c int, eps float64) []float64 {
	y := make([]float64, n*c)
	for j := range c {
		mean := 0.0
		for i := range n {
			mean += x[i*c+j]
		}
		mean /= float64(n)
		v := 0.0
		for i := range n {
			v += (x[i*c+j] - mean) * (x[i*c+j] - mean)
		}
		v /= float64(n)
		for i := range n {
			y[i*c+j] = gamma[j]*(x[i*c+j]-mean)/math.Sqrt(v+eps) + beta[j]
		}
	}
	return y
}

func randSlice(r *rand.Rand, n int, lo, hi float64) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = lo + (hi-lo)*r.Float64()
	}
	return s
}

func TestVoxelNormForward(t *testing.T) {
	for _, tc := range []struct {
		name string
		n, c int
		eps  float64
		dt   tensor.Dtype
		tol  float64
	}{
		{"f64 small", 5, 3, 1e-5, tensor.Float64, 1e-12},
		{"f64 one row", 1, 4, 1e-5, tensor.Float64, 1e-12},
		{"f64 large", 1000, 16, 1e-3, tensor.Float64, 1e-12},
		{"f32", 257, 8, 1e-5, tensor.Float32, 2e-5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(tc.n)))
			x := randSlice(r, tc.n*tc.c, -3, 5)
			gm := randSlice(r, tc.c, 0.5, 2)
			bt := randSlice(r, tc.c, -1, 1)
			want := refVoxelNorm(x, gm, bt, tc.n, tc.c, tc.eps)

			g := gorgonia.NewGraph()
			xn := gorgonia.NewMatrix(g, tc.dt, gorgonia.WithName("x"), gorgonia.WithValue(dense(tc.dt, x, tc.n, tc.c)))
			gn := gorgonia.NewVector(g, tc.dt, gorgonia.WithName("gamma"), gorgonia.WithValue(dense(tc.dt, gm, tc.c)))
			bn := gorgonia.NewVector(g, tc.dt, gorgonia.WithName("beta"), gorgonia.WithValue(dense(tc.dt, bt, tc.c)))
			y, err := VoxelNorm(xn, gn, bn, tc.eps)
			require.NoError(t, err)
			require.Equal(t, tensor.Shape{tc.n, tc.c}, y.Shape())
			vm := gorgonia.NewTapeMachine(g)
			defer vm.Close()
			require.NoError(t, vm.RunAll())
			got := float64s(t, y.Value())
			require.Len(t, got, len(want))
			for i := range want {
				require.InDelta(t, want[i], got[i], tc.tol, "element %d", i)
			}
		})
	}
}

// TestVoxelNormGradFD checks every gradient of VoxelNorm against central
// finite differences of the float64 reference, through the TapeMachine
// (symbolic Grad) and the LispMachine (DoDiff).
func TestVoxelNormGradFD(t *testing.T) {
	const n, c, eps = 7, 3, 1e-3
	r := rand.New(rand.NewPCG(7, 8))
	x := randSlice(r, n*c, -2, 2)
	gm := randSlice(r, c, 0.5, 2)
	bt := randSlice(r, c, -1, 1)
	wts := randSlice(r, n*c, -1, 1) // cost = Σ wts ⊙ y makes every gradient non-trivial
	cost := func(x, gm, bt []float64) float64 {
		y := refVoxelNorm(x, gm, bt, n, c, eps)
		s := 0.0
		for i := range y {
			s += wts[i] * y[i]
		}
		return s
	}
	fd := func(p []float64) []float64 { return centralDiff(p, 1e-6, func() float64 { return cost(x, gm, bt) }) }
	want := [][]float64{fd(x), fd(gm), fd(bt)}
	for _, machine := range []string{"tape", "lisp"} {
		t.Run(machine, func(t *testing.T) {
			_, got, grads := normGraph(t, tensor.Float64, machine, x, gm, bt, wts, n, c, func(xn, gn, bn *gorgonia.Node) (*gorgonia.Node, error) {
				return VoxelNorm(xn, gn, bn, eps)
			})
			require.InDelta(t, cost(x, gm, bt), got, 1e-12)
			requireGradsNear(t, want, grads, 1e-6)
		})
	}
}

// refVoxelNormGrads is the textbook backward pass, one channel at a time.
func refVoxelNormGrads(x, gamma, dy []float64, n, c int, eps float64) (dx, dg, db []float64) {
	dx, dg, db = make([]float64, n*c), make([]float64, c), make([]float64, c)
	for j := range c {
		mean, v := 0.0, 0.0
		for i := range n {
			mean += x[i*c+j]
		}
		mean /= float64(n)
		for i := range n {
			v += (x[i*c+j] - mean) * (x[i*c+j] - mean)
		}
		inv := 1 / math.Sqrt(v/float64(n)+eps)
		for i := range n {
			db[j] += dy[i*c+j]
			dg[j] += dy[i*c+j] * (x[i*c+j] - mean) * inv
		}
		for i := range n {
			xh := (x[i*c+j] - mean) * inv
			dx[i*c+j] = gamma[j] * inv * (dy[i*c+j] - db[j]/float64(n) - xh*dg[j]/float64(n))
		}
	}
	return dx, dg, db
}

// TestVoxelNormChunked covers batches of several parallel chunks: results
// match the references and are bit-identical for any GOMAXPROCS.
func TestVoxelNormChunked(t *testing.T) {
	const n, c, eps = 3*normChunkRows + 77, 5, 1e-4
	r := rand.New(rand.NewPCG(5, 6))
	x := randSlice(r, n*c, -2, 7)
	gm := randSlice(r, c, 0.5, 2)
	bt := randSlice(r, c, -1, 1)
	dy := randSlice(r, n*c, -1, 1)
	wantY := refVoxelNorm(x, gm, bt, n, c, eps)
	wantDx, wantDg, wantDb := refVoxelNormGrads(x, gm, dy, n, c, eps)
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		var first [][]float64
		for _, procs := range []int{1, 2, 3} {
			old := runtime.GOMAXPROCS(procs)
			y, err := voxelNormOp{eps: eps}.Do(dense(dt, x, n, c), dense(dt, gm, c), dense(dt, bt, c))
			require.NoError(t, err)
			got := [][]float64{float64s(t, y)}
			for w := range 3 {
				d, err := voxelNormGradOp{eps: eps, wrt: w}.Do(dense(dt, x, n, c), dense(dt, gm, c), dense(dt, dy, n, c))
				require.NoError(t, err)
				got = append(got, float64s(t, d))
			}
			runtime.GOMAXPROCS(old)
			if first == nil {
				first = got
				tol := 1e-11
				if dt == tensor.Float32 {
					tol = 2e-3 // sums over 3000 rows of float32 inputs
				}
				for i, want := range [][]float64{wantY, wantDx, wantDg, wantDb} {
					for k := range want {
						require.InDelta(t, want[k], got[i][k], tol*max(1, math.Abs(want[k])), "%v output %d[%d]", dt, i, k)
					}
				}
				continue
			}
			require.Equal(t, first, got, "GOMAXPROCS=%d changes the bits", procs)
		}
	}
}

func TestVoxelNormEmpty(t *testing.T) {
	op := voxelNormOp{eps: 1e-5}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		x := tensor.New(tensor.Of(dt), tensor.WithShape(0, 3))
		gm := tensor.New(tensor.Of(dt), tensor.WithShape(3))
		bt := tensor.New(tensor.Of(dt), tensor.WithShape(3))
		y, err := op.Do(x, gm, bt)
		require.NoError(t, err)
		require.Equal(t, tensor.Shape{0, 3}, y.Shape())
		require.Equal(t, dt, y.Dtype())
		for w, shape := range []tensor.Shape{{0, 3}, {3}, {3}} {
			d, err := voxelNormGradOp{eps: 1e-5, wrt: w}.Do(x, gm, x)
			require.NoError(t, err)
			require.Equal(t, shape, d.Shape())
			if w > 0 {
				require.Equal(t, []float64{0, 0, 0}, float64s(t, d), "sums over no rows are zero")
			}
		}
	}
}

func TestVoxelNormErrors(t *testing.T) {
	g := gorgonia.NewGraph()
	x := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithShape(4, 3), gorgonia.WithName("x"))
	x32 := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(4, 3), gorgonia.WithName("x32"))
	xi := gorgonia.NewMatrix(g, tensor.Int32, gorgonia.WithShape(4, 3), gorgonia.WithName("xi"))
	v3 := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithShape(3), gorgonia.WithName("v3"))
	v4 := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithShape(4), gorgonia.WithName("v4"))
	x3 := gorgonia.NewTensor(g, tensor.Float64, 3, gorgonia.WithShape(2, 2, 3), gorgonia.WithName("x3"))
	for _, tc := range []struct {
		name         string
		x, gm, bt    *gorgonia.Node
		eps          float64
		want         error
		wantContains string
	}{
		{"nil", nil, v3, v3, 1e-5, ErrNilInput, "x is nil"},
		{"eps zero", x, v3, v3, 0, ErrOption, "eps"},
		{"eps nan", x, v3, v3, math.NaN(), ErrOption, "eps"},
		{"eps inf", x, v3, v3, math.Inf(1), ErrOption, "eps"},
		{"gamma length", x, v4, v3, 1e-5, sparse.ErrShape, "[3]"},
		{"beta length", x, v3, v4, 1e-5, sparse.ErrShape, "[3]"},
		{"x rank", x3, v3, v3, 1e-5, sparse.ErrShape, "[N, C]"},
		{"mixed dtype", x32, v3, v3, 1e-5, sparse.ErrDType, "gamma has dtype float64 but x is float32"},
		{"int dtype", xi, v3, v3, 1e-5, sparse.ErrDType, "int32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := VoxelNorm(tc.x, tc.gm, tc.bt, tc.eps)
			require.Error(t, err)
			require.True(t, errors.Is(err, tc.want), "got %v", err)
			require.Contains(t, err.Error(), tc.wantContains)
		})
	}
	// Do rejects values whose shapes disagree.
	_, err := voxelNormOp{eps: 1}.Do(tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float64{1, 2, 3, 4})),
		tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{1, 2, 3})),
		tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{1, 2, 3})))
	require.ErrorIs(t, err, sparse.ErrShape)
}

func TestVoxelNormOpIdentity(t *testing.T) {
	a, b := voxelNormOp{eps: 1e-5}, voxelNormOp{eps: 1e-3}
	require.NotEqual(t, a.Hashcode(), b.Hashcode())
	require.Equal(t, "VoxelNorm{eps=1e-05}", a.String())
	ga, gb := voxelNormGradOp{eps: 1e-5, wrt: 0}, voxelNormGradOp{eps: 1e-5, wrt: 1}
	require.NotEqual(t, ga.Hashcode(), gb.Hashcode())
	// Type must be a fresh value each call (gorgonia recycles it).
	require.NotSame(t, a.Type(), a.Type())
}

func ExampleVoxelNorm() {
	g := gorgonia.NewGraph()
	x := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithName("x"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(4, 2), tensor.WithBacking([]float64{1, 10, 2, 20, 3, 30, 4, 40}))))
	gamma := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithName("gamma"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{1, 2}))))
	beta := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithName("beta"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(2), tensor.WithBacking([]float64{0, 100}))))
	y := gorgonia.Must(VoxelNorm(x, gamma, beta, 1e-9))
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		panic(err)
	}
	for i, v := range y.Value().Data().([]float64) {
		fmt.Printf("%9.3f", v)
		if i%2 == 1 {
			fmt.Println()
		}
	}
	// Output:
	//    -1.342   97.317
	//    -0.447   99.106
	//     0.447  100.894
	//     1.342  102.683
}

// Test helpers shared by the norm and loss tests.

func dense(dt tensor.Dtype, v []float64, shape ...int) *tensor.Dense {
	if dt == tensor.Float32 {
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(f))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), v...)))
}

func float64s(t *testing.T, v gorgonia.Value) []float64 {
	t.Helper()
	switch d := v.Data().(type) {
	case []float64:
		return append([]float64(nil), d...)
	case []float32:
		out := make([]float64, len(d))
		for i, x := range d {
			out[i] = float64(x)
		}
		return out
	}
	t.Fatalf("value holds %T", v.Data())
	return nil
}

func scalar(t *testing.T, v gorgonia.Value) float64 {
	t.Helper()
	s, err := scalarOf(v)
	require.NoError(t, err)
	return s
}

// BenchmarkVoxelNorm measures the forward op and the three gradient ops on
// a float32 batch of 32768 voxels × 32 channels.
func BenchmarkVoxelNorm(b *testing.B) {
	const n, c = 32768, 32
	r := rand.New(rand.NewPCG(1, 1))
	x := dense(tensor.Float32, randSlice(r, n*c, -1, 1), n, c)
	dy := dense(tensor.Float32, randSlice(r, n*c, -1, 1), n, c)
	gm := dense(tensor.Float32, randSlice(r, c, 0.5, 2), c)
	bt := dense(tensor.Float32, randSlice(r, c, -1, 1), c)
	for b.Loop() {
		if _, err := (voxelNormOp{eps: 1e-5}).Do(x, gm, bt); err != nil {
			b.Fatal(err)
		}
		for w := range 3 {
			if _, err := (voxelNormGradOp{eps: 1e-5, wrt: w}).Do(x, gm, dy); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(n*c)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Melem/s")
}

// normReLUInputs returns x, gamma, beta of an [n, c] batch whose betas
// spread over [−1.5, 1.5], so every channel has masked and passing
// elements (and some channels almost only one kind).
func normReLUInputs(seed uint64, n, c int) (x, gm, bt []float64) {
	r := rand.New(rand.NewPCG(seed, uint64(n*c)))
	x = randSlice(r, n*c, -3, 5)
	gm = randSlice(r, c, -2, 2) // negative gammas flip which side passes
	bt = randSlice(r, c, -1.5, 1.5)
	return x, gm, bt
}

// TestVoxelNormReLUMatchesPair requires the fused op to give the bits of
// VoxelNorm followed by ReLU: the forward and all three gradients, in
// float32 and float64, on batches of one and of several parallel chunks,
// for any GOMAXPROCS.
func TestVoxelNormReLUMatchesPair(t *testing.T) {
	for _, tc := range []struct {
		name string
		n, c int
	}{
		{"one row", 1, 4},
		{"one channel", 300, 1},
		{"small", 37, 5},
		{"chunks", 2*normChunkRows + 301, 6},
	} {
		for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
			t.Run(fmt.Sprintf("%s/%v", tc.name, dt), func(t *testing.T) {
				const eps = 1e-4
				x, gm, bt := normReLUInputs(3, tc.n, tc.c)
				dy := randSlice(rand.New(rand.NewPCG(4, 5)), tc.n*tc.c, -1, 1)
				xv, gv, bv, dyv := dense(dt, x, tc.n, tc.c), dense(dt, gm, tc.c), dense(dt, bt, tc.c), dense(dt, dy, tc.n, tc.c)

				// The pair: VoxelNorm, ReLU; backward ReLUGrad, VoxelNormGrad.
				y0, err := voxelNormOp{eps: eps}.Do(xv, gv, bv)
				require.NoError(t, err)
				want, err := reluApply("ReLU", y0, nil)
				require.NoError(t, err)
				dy0, err := reluApply("ReLUGrad", y0, dyv)
				require.NoError(t, err)
				wantGrads := make([]gorgonia.Value, 3)
				for w := range 3 {
					wantGrads[w], err = voxelNormGradOp{eps: eps, wrt: w}.Do(xv, gv, dy0)
					require.NoError(t, err)
				}
				masked := 0
				for _, v := range float64s(t, want) {
					if v == 0 {
						masked++
					}
				}
				if tc.c >= 4 {
					require.Greater(t, masked, tc.n*tc.c/10, "the mask must block a fair share")
					require.Less(t, masked, tc.n*tc.c*9/10, "the mask must pass a fair share")
				}

				for _, procs := range []int{1, 3} {
					old := runtime.GOMAXPROCS(procs)
					got, err := voxelNormOp{eps: eps, relu: true}.Do(xv, gv, bv)
					require.NoError(t, err)
					require.Equal(t, want.Data(), got.Data(), "forward, GOMAXPROCS=%d", procs)
					for w := range 3 {
						g, err := voxelNormGradOp{eps: eps, wrt: w, relu: true}.Do(xv, gv, bv, dyv)
						require.NoError(t, err)
						require.Equal(t, wantGrads[w].Shape(), g.Shape())
						require.Equal(t, wantGrads[w].Data(), g.Data(), "gradient %d, GOMAXPROCS=%d", w, procs)
					}
					runtime.GOMAXPROCS(old)
				}
			})
		}
	}
}

// TestVoxelNormReLUGraph builds both forms in a graph and requires the
// same bits from the TapeMachine (symbolic Grad: SymDiff) and the
// LispMachine (DoDiff) for the output and every gradient.
func TestVoxelNormReLUGraph(t *testing.T) {
	const n, c, eps = 50, 4, 1e-5
	x, gm, bt := normReLUInputs(9, n, c)
	wts := randSlice(rand.New(rand.NewPCG(1, 2)), n*c, -1, 1)
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		for _, machine := range []string{"tape", "lisp"} {
			t.Run(fmt.Sprintf("%v/%s", dt, machine), func(t *testing.T) {
				run := func(fused bool) [][]float64 {
					y, cost, grads := normGraph(t, dt, machine, x, gm, bt, wts, n, c, func(xn, gn, bn *gorgonia.Node) (*gorgonia.Node, error) {
						if fused {
							return VoxelNorm(xn, gn, bn, eps, WithReLU())
						}
						y, err := VoxelNorm(xn, gn, bn, eps)
						if err != nil {
							return nil, err
						}
						return ReLU(y)
					})
					return append([][]float64{y, {cost}}, grads...)
				}
				want, got := run(false), run(true)
				require.Equal(t, want, got)
			})
		}
	}
}

// reluNormCost is Σ wts ⊙ max(0, VoxelNorm(x)) by the float64 reference.
func reluNormCost(x, gm, bt, wts []float64, n, c int, eps float64) float64 {
	y := refVoxelNorm(x, gm, bt, n, c, eps)
	s := 0.0
	for i, v := range y {
		s += wts[i] * max(v, 0)
	}
	return s
}

// TestVoxelNormReLUGradFD checks the three gradients of the fused op
// against central finite differences of the float64 reference (inputs
// chosen with no normalised value near the kink at 0).
func TestVoxelNormReLUGradFD(t *testing.T) {
	const n, c, eps, h = 9, 3, 1e-3, 1e-6
	var x, gm, bt []float64
	for seed := uint64(1); ; seed++ {
		x, gm, bt = normReLUInputs(seed, n, c)
		near := false
		for _, v := range refVoxelNorm(x, gm, bt, n, c, eps) {
			near = near || math.Abs(v) < 1e-3
		}
		if !near {
			break
		}
	}
	wts := randSlice(rand.New(rand.NewPCG(2, 3)), n*c, -1, 1)
	fd := func(p []float64) []float64 {
		return centralDiff(p, h, func() float64 { return reluNormCost(x, gm, bt, wts, n, c, eps) })
	}
	want := [][]float64{fd(x), fd(gm), fd(bt)}
	zeros := 0
	for _, v := range refVoxelNorm(x, gm, bt, n, c, eps) {
		if v < 0 {
			zeros++
		}
	}
	require.Greater(t, zeros, 0, "some elements must be masked")
	require.Less(t, zeros, n*c, "some elements must pass")

	for _, machine := range []string{"tape", "lisp"} {
		t.Run(machine, func(t *testing.T) {
			_, got, grads := normGraph(t, tensor.Float64, machine, x, gm, bt, wts, n, c, func(xn, gn, bn *gorgonia.Node) (*gorgonia.Node, error) {
				return VoxelNorm(xn, gn, bn, eps, WithReLU())
			})
			require.InDelta(t, reluNormCost(x, gm, bt, wts, n, c, eps), got, 1e-12)
			requireGradsNear(t, want, grads, 1e-6)
		})
	}
}

func TestVoxelNormReLUEmpty(t *testing.T) {
	op := voxelNormOp{eps: 1e-5, relu: true}
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, c := range []int{3, 0} {
			x := tensor.New(tensor.Of(dt), tensor.WithShape(0, c))
			gm := tensor.New(tensor.Of(dt), tensor.WithShape(c))
			bt := tensor.New(tensor.Of(dt), tensor.WithShape(c))
			y, err := op.Do(x, gm, bt)
			require.NoError(t, err)
			require.Equal(t, tensor.Shape{0, c}, y.Shape())
			require.Equal(t, dt, y.Dtype())
			for w, shape := range []tensor.Shape{{0, c}, {c}, {c}} {
				gop := voxelNormGradOp{eps: 1e-5, wrt: w, relu: true}
				s, err := gop.InferShape(x.Shape(), gm.Shape(), bt.Shape(), x.Shape())
				require.NoError(t, err)
				require.Equal(t, shape, s)
				d, err := gop.Do(x, gm, bt, x)
				require.NoError(t, err)
				require.Equal(t, shape, d.Shape())
				if w > 0 && c > 0 {
					require.Equal(t, make([]float64, c), float64s(t, d), "sums over no rows are zero")
				}
			}
		}
	}
}

func TestVoxelNormReLUErrors(t *testing.T) {
	g := gorgonia.NewGraph()
	x := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithShape(4, 3), gorgonia.WithName("x"))
	v3 := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithShape(3), gorgonia.WithName("v3"))
	v4 := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithShape(4), gorgonia.WithName("v4"))
	_, err := VoxelNorm(x, v3, v3, 1e-5, nil)
	require.ErrorIs(t, err, ErrOption)
	require.Contains(t, err.Error(), "option 0 is nil")
	_, err = VoxelNorm(x, v3, v4, 1e-5, WithReLU())
	require.ErrorIs(t, err, sparse.ErrShape)
	_, err = VoxelNorm(x, v3, v3, -1, WithReLU())
	require.ErrorIs(t, err, ErrOption)

	m := func(n, c int) *tensor.Dense {
		return tensor.New(tensor.WithShape(n, c), tensor.WithBacking(make([]float64, n*c)))
	}
	v := func(c int) *tensor.Dense {
		return tensor.New(tensor.WithShape(c), tensor.WithBacking(make([]float64, c)))
	}
	gop := voxelNormGradOp{eps: 1, wrt: 0, relu: true}
	require.Equal(t, 4, gop.Arity())
	_, err = gop.Do(m(2, 3), v(3), m(2, 3)) // beta missing
	require.Error(t, err)
	_, err = gop.Do(m(2, 3), v(3), v(4), m(2, 3))
	require.ErrorIs(t, err, sparse.ErrShape)
	_, err = gop.Do(m(2, 3), v(3), v(3), m(3, 3))
	require.ErrorIs(t, err, sparse.ErrShape)
	_, err = gop.InferShape(tensor.Shape{2, 3}, tensor.Shape{3}, tensor.Shape{2}, tensor.Shape{2, 3})
	require.ErrorIs(t, err, sparse.ErrShape)
	f32 := tensor.New(tensor.WithShape(3), tensor.WithBacking(make([]float32, 3)))
	_, err = gop.Do(m(2, 3), v(3), f32, m(2, 3))
	require.ErrorIs(t, err, sparse.ErrDType)
}

func TestVoxelNormReLUOpIdentity(t *testing.T) {
	plain, fused := voxelNormOp{eps: 1e-5}, voxelNormOp{eps: 1e-5, relu: true}
	require.NotEqual(t, plain.Hashcode(), fused.Hashcode())
	require.Equal(t, "VoxelNormReLU{eps=1e-05}", fused.String())
	gp, gf := voxelNormGradOp{eps: 1e-5, wrt: 2}, voxelNormGradOp{eps: 1e-5, wrt: 2, relu: true}
	require.NotEqual(t, gp.Hashcode(), gf.Hashcode())
	require.Equal(t, "VoxelNormReLUGrad{eps=1e-05, wrt=2}", gf.String())
	require.Equal(t, 3, gp.Arity())
	require.NotSame(t, gf.Type(), gf.Type())
}

func ExampleWithReLU() {
	g := gorgonia.NewGraph()
	x := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithName("x"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(4, 1), tensor.WithBacking([]float64{1, 2, 3, 4}))))
	gamma := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithName("gamma"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{1}))))
	beta := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithName("beta"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(1), tensor.WithBacking([]float64{0.5}))))
	y := gorgonia.Must(VoxelNorm(x, gamma, beta, 1e-9, WithReLU()))
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		panic(err)
	}
	fmt.Printf("%.3f\n", y.Value().Data())
	// Output:
	// [0.000 0.053 0.947 1.842]
}

// normGraph builds cost = Σ wts ⊙ norm(x, gamma, beta) in a graph of dtype
// dt (x [n, c], gamma and beta [c]), runs it on machine ("tape": symbolic
// Grad; "lisp": DoDiff) and returns the output, the cost and the gradients
// with respect to x, gamma and beta, as float64.
func normGraph(t *testing.T, dt tensor.Dtype, machine string, x, gm, bt, wts []float64, n, c int,
	norm func(x, gamma, beta *gorgonia.Node) (*gorgonia.Node, error)) (y []float64, cost float64, grads [][]float64) {
	t.Helper()
	g := gorgonia.NewGraph()
	xn := gorgonia.NewMatrix(g, dt, gorgonia.WithName("x"), gorgonia.WithValue(dense(dt, x, n, c)))
	gn := gorgonia.NewVector(g, dt, gorgonia.WithName("gamma"), gorgonia.WithValue(dense(dt, gm, c)))
	bn := gorgonia.NewVector(g, dt, gorgonia.WithName("beta"), gorgonia.WithValue(dense(dt, bt, c)))
	wn := gorgonia.NewConstant(dense(dt, wts, n, c), gorgonia.WithName("w"))
	yn, err := norm(xn, gn, bn)
	require.NoError(t, err)
	costN := gorgonia.Must(gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(yn, wn))))
	learn := gorgonia.Nodes{xn, gn, bn}
	var vm gorgonia.VM
	if machine == "tape" {
		_, err = gorgonia.Grad(costN, learn...)
		require.NoError(t, err)
		vm = gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(learn...))
	} else {
		vm = gorgonia.NewLispMachine(g)
	}
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	for _, l := range learn {
		gv, err := l.Grad()
		require.NoError(t, err)
		grads = append(grads, float64s(t, gv))
	}
	return float64s(t, yn.Value()), scalar(t, costN.Value()), grads
}

// centralDiff returns the central finite differences (step h) of f with
// respect to every element of p, which f reads.
func centralDiff(p []float64, h float64, f func() float64) []float64 {
	d := make([]float64, len(p))
	for i := range p {
		o := p[i]
		p[i] = o + h
		up := f()
		p[i] = o - h
		dn := f()
		p[i] = o
		d[i] = (up - dn) / (2 * h)
	}
	return d
}

// requireGradsNear compares the gradients with respect to x, gamma and
// beta element by element.
func requireGradsNear(t *testing.T, want, got [][]float64, tol float64) {
	t.Helper()
	require.Len(t, got, len(want))
	for i, name := range []string{"x", "gamma", "beta"} {
		require.Len(t, got[i], len(want[i]), name)
		for j := range want[i] {
			require.InDelta(t, want[i][j], got[i][j], tol, "%s[%d]", name, j)
		}
	}
}
