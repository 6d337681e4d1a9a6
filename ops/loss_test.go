package ops

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/flexgemm-go/flexgemm/sparse"
)

// refXent is the float64 reference: probabilities by normalising exp(z)
// directly (fine for the moderate logits used with it).
func refXent(z []float64, labels []int32, w []float64, k int) float64 {
	num, den := 0.0, 0.0
	for i, l := range labels {
		if l == IgnoreLabel {
			continue
		}
		wi := 1.0
		if w != nil {
			wi = w[l]
		}
		s := 0.0
		for j := range k {
			s += math.Exp(z[i*k+j])
		}
		num += wi * -math.Log(math.Exp(z[i*k+int(l)])/s)
		den += wi
	}
	if den == 0 {
		return 0
	}
	return num / den
}

func randLabels(r *rand.Rand, n, k int, ignore bool) []int32 {
	l := make([]int32, n)
	for i := range l {
		l[i] = int32(r.IntN(k))
		if ignore && i%4 == 1 {
			l[i] = IgnoreLabel
		}
	}
	return l
}

func TestSoftmaxCrossEntropyForward(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n, k    int
		ignore  bool
		weights []float64
		dt      tensor.Dtype
		tol     float64
	}{
		{"f64 plain", 9, 4, false, nil, tensor.Float64, 1e-12},
		{"f64 ignore", 9, 4, true, nil, tensor.Float64, 1e-12},
		{"f64 weighted", 12, 3, true, []float64{0.5, 2, 1}, tensor.Float64, 1e-12},
		{"f64 one class", 5, 1, false, nil, tensor.Float64, 1e-12},
		{"f32", 300, 5, true, nil, tensor.Float32, 1e-5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(3, uint64(tc.n*tc.k)))
			z := randSlice(r, tc.n*tc.k, -4, 4)
			labels := randLabels(r, tc.n, tc.k, tc.ignore)
			want := refXent(z, labels, tc.weights, tc.k)

			g := gorgonia.NewGraph()
			zn := gorgonia.NewMatrix(g, tc.dt, gorgonia.WithName("z"), gorgonia.WithValue(dense(tc.dt, z, tc.n, tc.k)))
			var opts []LossOption
			if tc.weights != nil {
				opts = append(opts, WithClassWeights(tc.weights...))
			}
			loss, err := SoftmaxCrossEntropy(zn, labels, opts...)
			require.NoError(t, err)
			require.True(t, loss.IsScalar())
			require.Equal(t, tc.dt, loss.Dtype())
			vm := gorgonia.NewTapeMachine(g)
			defer vm.Close()
			require.NoError(t, vm.RunAll())
			require.InDelta(t, want, scalar(t, loss.Value()), tc.tol)
		})
	}
}

// TestSoftmaxCrossEntropyStable feeds logits whose exponentials overflow
// float64: the loss must equal that of the shifted logits.
func TestSoftmaxCrossEntropyStable(t *testing.T) {
	z := []float64{1000, 1001, 999, -1000, -1002, -999}
	shifted := []float64{1, 2, 0, 0, -2, 1}
	labels := []int32{1, 2}
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		op, err := newXentOp(2, 3, labels, nil)
		require.NoError(t, err)
		v, err := op.Do(dense(dt, z, 2, 3))
		require.NoError(t, err)
		got := scalar(t, v)
		require.False(t, math.IsNaN(got) || math.IsInf(got, 0))
		require.InDelta(t, refXent(shifted, labels, nil, 3), got, 1e-6)
		d, err := xentGradOp{op}.Do(dense(dt, z, 2, 3), gorgonia.NewF64(1))
		require.NoError(t, err)
		for _, x := range float64s(t, d) {
			require.False(t, math.IsNaN(x) || math.IsInf(x, 0))
		}
	}
}

// TestSoftmaxCrossEntropyGradFD checks the logits' gradient against central
// differences of the reference, through the TapeMachine (symbolic Grad) and
// the LispMachine (DoDiff), with an upstream factor so the incoming gradient
// is not 1.
func TestSoftmaxCrossEntropyGradFD(t *testing.T) {
	const n, k = 8, 4
	r := rand.New(rand.NewPCG(11, 12))
	z := randSlice(r, n*k, -3, 3)
	labels := randLabels(r, n, k, true)
	weights := []float64{1, 0.25, 3, 0}
	const scale = 2.5
	for _, tc := range []struct {
		name    string
		weights []float64
	}{{"unweighted", nil}, {"weighted", weights}} {
		want := make([]float64, len(z))
		for i := range z {
			const h = 1e-6
			o := z[i]
			z[i] = o + h
			up := refXent(z, labels, tc.weights, k)
			z[i] = o - h
			dn := refXent(z, labels, tc.weights, k)
			z[i] = o
			want[i] = scale * (up - dn) / (2 * h)
		}
		for _, machine := range []string{"tape", "lisp"} {
			t.Run(tc.name+"/"+machine, func(t *testing.T) {
				g := gorgonia.NewGraph()
				zn := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithName("z"), gorgonia.WithValue(dense(tensor.Float64, z, n, k)))
				var opts []LossOption
				if tc.weights != nil {
					opts = append(opts, WithClassWeights(tc.weights...))
				}
				loss, err := SoftmaxCrossEntropy(zn, labels, opts...)
				require.NoError(t, err)
				cost := gorgonia.Must(gorgonia.Mul(loss, gorgonia.NewConstant(scale)))
				var vm gorgonia.VM
				if machine == "tape" {
					_, err = gorgonia.Grad(cost, zn)
					require.NoError(t, err)
					vm = gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(zn))
				} else {
					vm = gorgonia.NewLispMachine(g)
				}
				defer vm.Close()
				require.NoError(t, vm.RunAll())
				require.InDelta(t, scale*refXent(z, labels, tc.weights, k), scalar(t, cost.Value()), 1e-12)
				gv, err := zn.Grad()
				require.NoError(t, err)
				got := float64s(t, gv)
				for i := range want {
					require.InDelta(t, want[i], got[i], 1e-6, "dz[%d]", i)
				}
				// Ignored rows get exactly zero gradient.
				for i, l := range labels {
					if l == IgnoreLabel {
						require.Equal(t, make([]float64, k), got[i*k:i*k+k])
					}
				}
			})
		}
	}
}

func TestSoftmaxCrossEntropyNoRows(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		labels  []int32
		weights []float64
	}{
		{"empty", 0, []int32{}, nil},
		{"all ignored", 2, []int32{IgnoreLabel, IgnoreLabel}, nil},
		{"zero weight", 2, []int32{1, 1}, []float64{1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, err := newXentOp(tc.n, 2, tc.labels, tc.weights)
			require.NoError(t, err)
			var z tensor.Tensor = tensor.New(tensor.Of(tensor.Float64), tensor.WithShape(0, 2))
			if tc.n > 0 {
				z = dense(tensor.Float64, []float64{1, 2, 3, 4}, 2, 2)
			}
			v, err := op.Do(z)
			require.NoError(t, err)
			require.Equal(t, 0.0, scalar(t, v))
			d, err := xentGradOp{op}.Do(z, gorgonia.NewF64(1))
			require.NoError(t, err)
			require.Equal(t, tensor.Shape{tc.n, 2}, d.Shape())
			if tc.n > 0 {
				require.Equal(t, make([]float64, 4), float64s(t, d))
			}
		})
	}
}

func TestSoftmaxCrossEntropyErrors(t *testing.T) {
	g := gorgonia.NewGraph()
	z := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithShape(3, 2), gorgonia.WithName("z"))
	zi := gorgonia.NewMatrix(g, tensor.Int64, gorgonia.WithShape(3, 2), gorgonia.WithName("zi"))
	zv := gorgonia.NewVector(g, tensor.Float64, gorgonia.WithShape(3), gorgonia.WithName("zv"))
	for _, tc := range []struct {
		name     string
		z        *gorgonia.Node
		labels   []int32
		opts     []LossOption
		want     error
		contains string
	}{
		{"nil", nil, []int32{0, 0, 0}, nil, ErrNilInput, "logits is nil"},
		{"dtype", zi, []int32{0, 0, 0}, nil, sparse.ErrDType, "int64"},
		{"rank", zv, []int32{0, 0, 0}, nil, sparse.ErrShape, "[N, K]"},
		{"label count", z, []int32{0, 1}, nil, sparse.ErrShape, "[3]"},
		{"label too big", z, []int32{0, 2, 1}, nil, sparse.ErrOutOfRange, "label 2 of row 1"},
		{"label negative", z, []int32{0, 1, -2}, nil, sparse.ErrOutOfRange, "label -2 of row 2"},
		{"weight count", z, []int32{0, 1, 1}, []LossOption{WithClassWeights(1, 2, 3)}, sparse.ErrShape, "class weights"},
		{"weight negative", z, []int32{0, 1, 1}, []LossOption{WithClassWeights(1, -2)}, ErrOption, "class weight 1"},
		{"weight nan", z, []int32{0, 1, 1}, []LossOption{WithClassWeights(math.NaN(), 1)}, ErrOption, "class weight 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := SoftmaxCrossEntropy(tc.z, tc.labels, tc.opts...)
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), tc.contains)
		})
	}
}

// TestSoftmaxCrossEntropyDistinctLabels makes sure two losses over the same
// logits with different labels stay two nodes (gorgonia merges nodes whose
// op hashes and children agree).
func TestSoftmaxCrossEntropyDistinctLabels(t *testing.T) {
	g := gorgonia.NewGraph()
	z := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithName("z"), gorgonia.WithValue(dense(tensor.Float64, []float64{0, 3, 1, 0}, 2, 2)))
	a := gorgonia.Must(SoftmaxCrossEntropy(z, []int32{0, 0}))
	b := gorgonia.Must(SoftmaxCrossEntropy(z, []int32{1, 1}))
	require.NotSame(t, a, b)
	vm := gorgonia.NewTapeMachine(g)
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	require.NotEqual(t, scalar(t, a.Value()), scalar(t, b.Value()))
}

func TestArgmaxRows(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    gorgonia.Value
		want []int32
		err  error
	}{
		{"f64", dense(tensor.Float64, []float64{1, 3, 2, 5, 4, 0}, 2, 3), []int32{1, 0}, nil},
		{"f32 tie", dense(tensor.Float32, []float64{2, 2, 1, -1, 0, 0}, 2, 3), []int32{0, 1}, nil},
		{"empty", tensor.New(tensor.Of(tensor.Float64), tensor.WithShape(0, 3)), []int32{}, nil},
		{"vector", dense(tensor.Float64, []float64{1, 2}, 2), nil, sparse.ErrShape},
		{"int", tensor.New(tensor.WithShape(1, 2), tensor.WithBacking([]int32{1, 2})), nil, sparse.ErrDType},
		{"nil", nil, nil, sparse.ErrShape},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ArgmaxRows(tc.v)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func ExampleSoftmaxCrossEntropy() {
	g := gorgonia.NewGraph()
	logits := gorgonia.NewMatrix(g, tensor.Float64, gorgonia.WithName("logits"),
		gorgonia.WithValue(tensor.New(tensor.WithShape(3, 2), tensor.WithBacking([]float64{2, 0, 0, 2, 5, 5}))))
	// The third voxel is unlabelled and does not count.
	loss := gorgonia.Must(SoftmaxCrossEntropy(logits, []int32{0, 1, IgnoreLabel}))
	if _, err := gorgonia.Grad(loss, logits); err != nil {
		panic(err)
	}
	vm := gorgonia.NewTapeMachine(g, gorgonia.BindDualValues(logits))
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		panic(err)
	}
	pred, _ := ArgmaxRows(logits.Value())
	grad, _ := logits.Grad()
	fmt.Printf("loss %.4f\npredictions %v\ngrad %.4f\n", loss.Value().Data(), pred, grad.Data())
	// Output:
	// loss 0.1269
	// predictions [0 1 0]
	// grad [-0.0596 0.0596 0.0596 -0.0596 0.0000 0.0000]
}
