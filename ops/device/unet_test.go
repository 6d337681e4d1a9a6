package device_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The test network: a two- or three-level sparse UNet with every op a
// sparse segmentation network needs (submanifold, strided and inverse
// convolutions, VoxelNorm, ReLU, a channel concatenation whose input also
// feeds the next level — so gorgonia.Grad sums two gradients with its
// built-in Add —, a 1×1×1 head with bias, softmax cross-entropy).

// netConfig sizes the test network.
type netConfig struct {
	in, width, levels, classes int
	algo                       sparse.Algorithm
	// smooth leaves out the ReLUs: every op is then differentiable
	// everywhere, so a narrow-precision step can be compared with float32
	// without ReLU masks that flip on rounding (see
	// TestReLUGradientsAreIllConditioned).
	smooth bool
}

// batch is one batch: coordinates, maps, features and labels.
type batch struct {
	maps   *netMaps
	x      *tensor.Dense // [N, in] float32 host
	labels []int32
}

type netMaps struct {
	sub, down, up []*kmap.Map
	head          *kmap.Map
}

// makeBatch draws n voxels of a batch of two scenes in a g³ grid, random
// features and labels (a few ignored).
func makeBatch(t testing.TB, cfg netConfig, n, g int, seed uint64) *batch {
	rng := rand.New(rand.NewPCG(seed, 7))
	ext := grid.Extent{Batch: 2, X: g, Y: g, Z: g}
	seen := map[[4]int32]bool{}
	coords := make([]int32, 0, 4*n)
	for len(coords) < 4*n {
		c := [4]int32{int32(rng.IntN(2)), int32(rng.IntN(g)), int32(rng.IntN(g)), int32(rng.IntN(g))}
		if seen[c] {
			continue
		}
		seen[c] = true
		coords = append(coords, c[:]...)
	}
	return newBatch(t, cfg, coords, ext, seed)
}

// newBatch builds the maps of the given voxels and draws features and
// labels.
func newBatch(t testing.TB, cfg netConfig, coords []int32, ext grid.Extent, seed uint64) *batch {
	rng := rand.New(rand.NewPCG(seed, 8))
	n := len(coords) / 4
	mp := &netMaps{sub: make([]*kmap.Map, cfg.levels), down: make([]*kmap.Map, cfg.levels), up: make([]*kmap.Map, cfg.levels)}
	var err error
	mp.head, err = kmap.NewSubmanifold(coords, ext, [3]int{1, 1, 1}, [3]int{1, 1, 1})
	require.NoError(t, err)
	cs, ex := coords, ext
	for l := range cfg.levels {
		if l > 0 {
			mp.down[l], err = kmap.NewStrided(cs, ex, grid.Cube(2, 2, 0, 1), nil)
			require.NoError(t, err)
			mp.up[l-1], err = kmap.NewInverse(mp.down[l])
			require.NoError(t, err)
			cs, ex = mp.down[l].OutCoords, mp.down[l].Out
		}
		mp.sub[l], err = kmap.NewSubmanifold(cs, ex, [3]int{3, 3, 3}, [3]int{1, 1, 1})
		require.NoError(t, err)
	}
	x := make([]float32, n*cfg.in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	// Labels follow the features (so the gradients carry a signal rather
	// than cancelling noise); a few rows are ignored.
	labels := make([]int32, n)
	for i := range labels {
		l := 0
		for c := range min(cfg.in, 2) {
			if x[i*cfg.in+c] > 0 {
				l |= 1 << c
			}
		}
		labels[i] = int32(l % cfg.classes)
		if i%17 == 5 {
			labels[i] = ops.IgnoreLabel
		}
	}
	return &batch{maps: mp, x: tensor.New(tensor.WithShape(n, cfg.in), tensor.WithBacking(x)), labels: labels}
}

// stepTransfers is what one training step of runStep copies: the features
// (4 bytes a value, in the activation dtype's host form) and the labels
// up, the loss and the predictions down.
func (b *batch) stepTransfers(cfg netConfig) device.Transfers {
	n := int64(b.x.Shape()[0])
	var want device.Transfers
	want.Up[device.Inputs] = n*int64(cfg.in)*4 + n*4
	want.Down[device.Scalars] = 4
	want.Down[device.Metrics] = n * 4
	return want
}

// param is one named learnable.
type param struct {
	name string
	t    *tensor.Dense
}

// newParams draws He-initialised weights, random norm affines and a head
// bias (host float32), in a fixed order.
func newParams(cfg netConfig, seed uint64) []param {
	rng := rand.New(rand.NewPCG(seed, 11))
	var ps []param
	conv := func(name string, k, ci, co int) {
		std := math.Sqrt(2 / float64(k*k*k*ci))
		v := make([]float32, co*k*k*k*ci)
		for i := range v {
			v[i] = float32(std * rng.NormFloat64())
		}
		ps = append(ps, param{name + ".w", tensor.New(tensor.WithShape(co, k, k, k, ci), tensor.WithBacking(v))})
	}
	vec := func(name string, c int, mean, std float64) {
		v := make([]float32, c)
		for i := range v {
			v[i] = float32(mean + std*rng.NormFloat64())
		}
		ps = append(ps, param{name, tensor.New(tensor.WithShape(c), tensor.WithBacking(v))})
	}
	norm := func(name string, c int) {
		vec(name+".gamma", c, 1, 0.1)
		vec(name+".beta", c, 0, 0.1)
	}
	w := func(l int) int { return cfg.width << l }
	conv("enc0", 3, cfg.in, w(0))
	norm("enc0.norm", w(0))
	for l := 1; l < cfg.levels; l++ {
		conv(fmt.Sprintf("down%d", l), 2, w(l-1), w(l))
		norm(fmt.Sprintf("down%d.norm", l), w(l))
		conv(fmt.Sprintf("enc%d", l), 3, w(l), w(l))
		norm(fmt.Sprintf("enc%d.norm", l), w(l))
	}
	for l := cfg.levels - 2; l >= 0; l-- {
		conv(fmt.Sprintf("up%d", l), 2, w(l+1), w(l))
		norm(fmt.Sprintf("up%d.norm", l), w(l))
		conv(fmt.Sprintf("dec%d", l), 3, 2*w(l), w(l))
		norm(fmt.Sprintf("dec%d.norm", l), w(l))
	}
	conv("head", 1, w(0), cfg.classes)
	vec("head.bias", cfg.classes, 0, 0.1)
	return ps
}

// net is the graph of one batch.
type net struct {
	g          *gorgonia.ExprGraph
	learnables gorgonia.Nodes
	grads      gorgonia.Nodes
	logits     *gorgonia.Node
	loss       *gorgonia.Node
}

// buildNet builds forward and gradient graph over the given parameter
// and feature values — host or device tensors alike: the same code for
// both sides.
func buildNet(cfg netConfig, params []*tensor.Dense, x *tensor.Dense, b *batch, lossOpts ...ops.LossOption) (*net, error) {
	g := gorgonia.NewGraph()
	nt := &net{g: g}
	p := map[string]*gorgonia.Node{}
	names := newParamNames(cfg)
	for i, v := range params {
		n := gorgonia.NewTensor(g, tensor.Float32, v.Dims(), gorgonia.WithShape(v.Shape().Clone()...), gorgonia.WithName(names[i]), gorgonia.WithValue(v))
		p[names[i]] = n
		nt.learnables = append(nt.learnables, n)
	}
	in := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(x.Shape().Clone()...), gorgonia.WithName("x"), gorgonia.WithValue(x))
	opt := ops.WithAlgorithm(cfg.algo)
	var err error
	type convFn func(x, w *gorgonia.Node, m *kmap.Map, opts ...ops.ConvOption) (*gorgonia.Node, error)
	cnr := func(f convFn, h *gorgonia.Node, name string, m *kmap.Map) *gorgonia.Node {
		if err != nil {
			return nil
		}
		if h, err = f(h, p[name+".w"], m, opt); err != nil {
			return nil
		}
		// VoxelNorm and ReLU as one fused op; smooth leaves the ReLU out.
		var relu []ops.NormOption
		if !cfg.smooth {
			relu = append(relu, ops.WithReLU())
		}
		h, err = ops.VoxelNorm(h, p[name+".norm.gamma"], p[name+".norm.beta"], 1e-5, relu...)
		return h
	}
	skips := make([]*gorgonia.Node, cfg.levels)
	h := cnr(ops.SubMConv3d, in, "enc0", b.maps.sub[0])
	skips[0] = h
	for l := 1; l < cfg.levels; l++ {
		h = cnr(ops.SparseConv3d, h, fmt.Sprintf("down%d", l), b.maps.down[l])
		h = cnr(ops.SubMConv3d, h, fmt.Sprintf("enc%d", l), b.maps.sub[l])
		skips[l] = h
	}
	for l := cfg.levels - 2; l >= 0; l-- {
		h = cnr(ops.InverseConv3d, h, fmt.Sprintf("up%d", l), b.maps.up[l])
		if err == nil {
			h, err = ops.ConcatChannels(h, skips[l])
		}
		h = cnr(ops.SubMConv3d, h, fmt.Sprintf("dec%d", l), b.maps.sub[l])
	}
	if err == nil {
		nt.logits, err = ops.SubMConv3d(h, p["head.w"], b.maps.head, opt, ops.WithBias(p["head.bias"]))
	}
	if err == nil {
		nt.loss, err = ops.SoftmaxCrossEntropy(nt.logits, b.labels, lossOpts...)
	}
	if err == nil {
		nt.grads, err = gorgonia.Grad(nt.loss, nt.learnables...)
	}
	if err != nil {
		return nil, err
	}
	return nt, nil
}

// paramNames caches newParamNames per configuration: drawing the
// parameters only for their names cost more than the rest of a graph
// build of the benchmark's 4-level UNet.
var paramNames sync.Map // netConfig → []string

// newParamNames returns the names of newParams' parameters, in order.
func newParamNames(cfg netConfig) []string {
	if v, ok := paramNames.Load(cfg); ok {
		return v.([]string)
	}
	ps := newParams(cfg, 0)
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.name
	}
	paramNames.Store(cfg, names)
	return names
}

// stepNet uploads b's features into d's open step and builds the net over
// them, the loss gradient scaled by scale.
func stepNet(t testing.TB, d *device.Device, cfg netConfig, params []*tensor.Dense, b *batch, scale float64) *net {
	t.Helper()
	x, err := d.Input(b.x)
	require.NoError(t, err)
	var lossOpts []ops.LossOption
	if scale != 1 {
		lossOpts = append(lossOpts, ops.WithLossScale(scale))
	}
	nt, err := buildNet(cfg, params, x, b, lossOpts...)
	require.NoError(t, err)
	return nt
}

// stepResult is what one training step produced, on the host.
type stepResult struct {
	loss  float64
	grads [][]float32 // per parameter, unscaled
	pred  []int32
	xfer  device.Transfers // bytes copied during the step
}

// runStep runs forward and backward of one batch on device d (parameters
// already there), returns loss, gradients (copied to the host after the
// step's transfers were recorded, divided by gradScale) and predictions.
// With opt set it also applies the optimiser (through scaler if given).
func runStep(t testing.TB, d *device.Device, cfg netConfig, params []*tensor.Dense, b *batch, gradScale float64, opt *device.Adam, scaler *device.LossScaler) stepResult {
	st, err := d.BeginStep()
	require.NoError(t, err)
	defer func() { require.NoError(t, st.End()) }()
	nt := stepNet(t, d, cfg, params, b, gradScale)
	var logits gorgonia.Value
	gorgonia.Read(nt.logits, &logits)
	vm := gorgonia.NewTapeMachine(nt.g, d.VMOpt())
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	var res stepResult
	res.loss = scalarValue(t, nt.loss.Value())
	res.pred, err = ops.ArgmaxRows(logits)
	require.NoError(t, err)
	gv := make([]gorgonia.Value, len(nt.grads))
	for i, g := range nt.grads {
		gv[i] = g.Value()
	}
	if opt != nil {
		if scaler != nil {
			_, err = scaler.Step(d, opt, params, gv)
		} else {
			err = opt.Step(params, gv, 1/gradScale)
		}
		require.NoError(t, err)
	}
	res.xfer = st.Transfers()
	for _, g := range gv {
		h, err := d.ToHost(g, device.Other)
		require.NoError(t, err)
		s := append([]float32(nil), h.Data().([]float32)...)
		for i := range s {
			s[i] = float32(float64(s[i]) / gradScale)
		}
		res.grads = append(res.grads, s)
	}
	return res
}

func scalarValue(t testing.TB, v gorgonia.Value) float64 {
	switch s := v.Data().(type) {
	case float32:
		return float64(s)
	case float64:
		return s
	}
	t.Fatalf("loss is %T", v.Data())
	return 0
}

// toDevice copies host parameters to d (copies on the host device).
func toDevice(t testing.TB, d *device.Device, ps []param) []*tensor.Dense {
	out := make([]*tensor.Dense, len(ps))
	for i, p := range ps {
		var err error
		if d.IsHost() {
			out[i] = p.t.Clone().(*tensor.Dense)
			continue
		}
		out[i], err = d.ToDevice(p.t)
		require.NoError(t, err)
	}
	return out
}

// relErr returns ‖a − b‖ / ‖b‖ (NaN never passes: it returns +Inf).
func relErr(a, b []float32) float64 {
	var num, den float64
	for i := range b {
		x, y := float64(a[i]), float64(b[i])
		if math.IsNaN(x) || math.IsNaN(y) {
			return math.Inf(1)
		}
		num += (x - y) * (x - y)
		den += y * y
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// compareSteps checks loss and every gradient of got against want.
func compareSteps(t testing.TB, names []string, got, want stepResult, tol float64) (worst float64) {
	t.Helper()
	lossErr := math.Abs(got.loss-want.loss) / math.Abs(want.loss)
	require.Less(t, lossErr, tol, "loss %v, want %v", got.loss, want.loss)
	require.Len(t, got.grads, len(want.grads))
	worst = lossErr
	for i := range want.grads {
		e := relErr(got.grads[i], want.grads[i])
		require.Less(t, e, tol, "gradient of %s: relative error %g", names[i], e)
		worst = max(worst, e)
	}
	return worst
}
