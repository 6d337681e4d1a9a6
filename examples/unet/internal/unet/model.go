// Package unet is the sparse 3D UNet of the example: its parameters, the
// kernel maps of a batch, the graph built for every batch, the training
// and evaluation loops, metrics and checkpoints.
//
// # Pattern
//
// Gorgonia graphs have static shapes, and every batch has its own number of
// voxels, so a new gorgonia.ExprGraph is built per batch. The parameters
// live outside the graphs, as *tensor.Dense values created once; each graph
// binds them with gorgonia.WithValue, so the optimiser (device.Adam,
// created once, fed the gradient nodes of gorgonia.Grad in the same order
// every step) updates them in place.
//
// # Devices
//
// The same graph code runs on the host (the default), on a fake device (a
// CPU emulation used by tests) or on a GPU (build tag cudaext): Model.Place
// copies the parameters to a device of package ops/device once, every
// batch is one device.Step (features up, loss and predictions down), and
// the graph uses only ops that run on device memory (ops.VoxelNorm with a
// fused ReLU and ops.ConcatChannels instead of gorgonia.Rectify and
// gorgonia.Concat).
// Model.Params always holds the host copy; Save reads the device copy
// back first.
//
// # Network
//
// With base width c and L levels (level l has c·2^l channels):
//
//	enc0  = block(x)                               Convs × (3×3×3 submanifold conv, VoxelNorm, ReLU)
//	encl  = block(down_l(enc(l−1)))               down: 2×2×2 stride-2 sparse conv, VoxelNorm, ReLU
//	decl  = block(concat(up_l(dec(l+1)), encl))   up: inverse conv of down_(l+1), VoxelNorm, ReLU
//	logits = head(dec0)                            1×1×1 submanifold conv with bias
package unet

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// ErrConfig reports an invalid model configuration.
var ErrConfig = errors.New("unet: bad configuration")

// Config describes the network.
type Config struct {
	// InChannels is the width of the input features (1: occupancy).
	InChannels int
	// Channels is the width of level 0; level l has Channels·2^l.
	Channels int
	// Levels is the number of resolutions (1 = no down-sampling).
	Levels int
	// Convs is the number of 3×3×3 convolutions per block.
	Convs int
	// Classes is the number of output classes.
	Classes int
	// Eps is VoxelNorm's epsilon.
	Eps float64
	// DType is tensor.Float32 or tensor.Float64.
	DType tensor.Dtype
	// Algorithm is the GEMM formulation of every convolution.
	Algorithm sparse.Algorithm
}

// DefaultConfig returns the example's network for the given number of
// classes.
func DefaultConfig(classes int) Config {
	return Config{InChannels: 1, Channels: 8, Levels: 3, Convs: 1, Classes: classes, Eps: 1e-5, DType: tensor.Float32, Algorithm: sparse.Auto}
}

// Validate reports whether the configuration describes a network.
func (c Config) Validate() error {
	switch {
	case c.InChannels < 1 || c.InChannels > 4096:
		return fmt.Errorf("%w: %d input channels", ErrConfig, c.InChannels)
	case c.Channels < 1 || c.Channels > 4096:
		return fmt.Errorf("%w: %d channels", ErrConfig, c.Channels)
	case c.Levels < 1 || c.Levels > 8:
		return fmt.Errorf("%w: %d levels (want 1 to 8)", ErrConfig, c.Levels)
	case c.Convs < 1 || c.Convs > 8:
		return fmt.Errorf("%w: %d convolutions per block (want 1 to 8)", ErrConfig, c.Convs)
	case c.Classes < 2 || c.Classes > 4096:
		return fmt.Errorf("%w: %d classes", ErrConfig, c.Classes)
	case !(c.Eps > 0) || math.IsInf(c.Eps, 0):
		return fmt.Errorf("%w: eps %v", ErrConfig, c.Eps)
	case c.DType != tensor.Float32 && c.DType != tensor.Float64:
		return fmt.Errorf("%w: dtype %v (want float32 or float64)", ErrConfig, c.DType)
	}
	return c.Algorithm.Valid()
}

// width returns the channels of level l.
func (c Config) width(l int) int { return c.Channels << l }

// Param is one named learnable tensor.
type Param struct {
	Name  string
	Value *tensor.Dense
}

// Model holds the parameters of a network, in a fixed order.
type Model struct {
	Config Config
	// Params are the host copies of the parameters. While the model is
	// placed on a device they may be stale; Sync refreshes them.
	Params []Param

	dev    *device.Device  // nil: the host
	values []*tensor.Dense // the parameters where the model computes
}

// Device returns the device the model computes on (device.Host() unless
// Place moved it).
func (m *Model) Device() *device.Device {
	if m.dev == nil {
		return device.Host()
	}
	return m.dev
}

// Place moves the model to device d: the parameters are copied there once
// (float32 storage: the master weights) and every later Step, Predict and
// Evaluate runs there. Placing on device.Host() computes on Params
// directly. A float64 model can only run on the host.
func (m *Model) Place(d *device.Device) error {
	if d == nil {
		d = device.Host()
	}
	if !d.IsHost() && m.Config.DType != tensor.Float32 {
		return fmt.Errorf("%w: %v parameters cannot run on %s (devices compute in float32 or narrower)", ErrConfig, m.Config.DType, d.Name())
	}
	if err := m.Sync(); err != nil {
		return err
	}
	m.freeDevice()
	m.dev = d
	return m.upload()
}

// upload makes the computing copies of the parameters.
func (m *Model) upload() error {
	m.values = make([]*tensor.Dense, len(m.Params))
	for i, p := range m.Params {
		if m.dev == nil || m.dev.IsHost() {
			m.values[i] = p.Value
			continue
		}
		v, err := m.dev.ToDevice(p.Value)
		if err != nil {
			m.freeDevice()
			return fmt.Errorf("unet: copying %s to %s: %w", p.Name, m.dev.Name(), err)
		}
		m.values[i] = v
	}
	return nil
}

// freeDevice releases the device copies of the parameters.
func (m *Model) freeDevice() {
	if m.dev != nil && !m.dev.IsHost() {
		for _, v := range m.values {
			if v != nil {
				_ = m.dev.Free(v)
			}
		}
	}
	m.values = nil
}

// Sync copies the parameters from the device back into Params (a no-op on
// the host).
func (m *Model) Sync() error {
	if m.dev == nil || m.dev.IsHost() || m.values == nil {
		return nil
	}
	for i, p := range m.Params {
		h, err := m.dev.ToHost(m.values[i], device.Params)
		if err != nil {
			return fmt.Errorf("unet: copying %s from %s: %w", p.Name, m.dev.Name(), err)
		}
		copy(p.Value.Data().([]float32), h.Data().([]float32))
	}
	return nil
}

// paramValues returns the tensors the graph binds (the host Params unless
// placed on a device).
func (m *Model) paramValues() []*tensor.Dense {
	if m.values != nil {
		return m.values
	}
	vs := make([]*tensor.Dense, len(m.Params))
	for i, p := range m.Params {
		vs[i] = p.Value
	}
	return vs
}

// New creates a network with He-initialised convolution weights (normal,
// std √(2/fan-in)), unit norm scales and zero shifts and biases, drawn
// deterministically from seed.
func New(cfg Config, seed uint64) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{Config: cfg}
	r := rand.New(rand.NewPCG(seed, 0x756e6574)) // "unet"
	conv := func(name string, k, ci, co int) {
		std := math.Sqrt(2 / float64(k*k*k*ci))
		v := make([]float64, co*k*k*k*ci)
		for i := range v {
			v[i] = std * r.NormFloat64()
		}
		m.Params = append(m.Params, Param{name + ".weight", m.dense(v, co, k, k, k, ci)})
	}
	norm := func(name string, c int) {
		one := make([]float64, c)
		for i := range one {
			one[i] = 1
		}
		m.Params = append(m.Params,
			Param{name + ".gamma", m.dense(one, c)},
			Param{name + ".beta", m.dense(make([]float64, c), c)})
	}
	// block adds the Convs 3×3×3 convolutions (+ norm) of one block.
	block := func(name string, ci, co int) {
		for j := 1; j <= cfg.Convs; j++ {
			conv(fmt.Sprintf("%s.conv%d", name, j), 3, ci, co)
			norm(fmt.Sprintf("%s.norm%d", name, j), co)
			ci = co
		}
	}
	block("enc0", cfg.InChannels, cfg.width(0))
	for l := 1; l < cfg.Levels; l++ {
		conv(fmt.Sprintf("down%d.conv", l), 2, cfg.width(l-1), cfg.width(l))
		norm(fmt.Sprintf("down%d.norm", l), cfg.width(l))
		block(fmt.Sprintf("enc%d", l), cfg.width(l), cfg.width(l))
	}
	for l := cfg.Levels - 2; l >= 0; l-- {
		conv(fmt.Sprintf("up%d.conv", l), 2, cfg.width(l+1), cfg.width(l))
		norm(fmt.Sprintf("up%d.norm", l), cfg.width(l))
		block(fmt.Sprintf("dec%d", l), 2*cfg.width(l), cfg.width(l))
	}
	conv("head", 1, cfg.width(0), cfg.Classes)
	m.Params = append(m.Params, Param{"head.bias", m.dense(make([]float64, cfg.Classes), cfg.Classes)})
	return m, nil
}

// dense makes a tensor of the model's dtype from float64 values.
func (m *Model) dense(v []float64, shape ...int) *tensor.Dense {
	if m.Config.DType == tensor.Float32 {
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(f))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))
}

// NumParams returns the number of scalar parameters.
func (m *Model) NumParams() int {
	n := 0
	for _, p := range m.Params {
		n += p.Value.Shape().TotalSize()
	}
	return n
}

// Maps holds the kernel maps of one batch at every level.
type Maps struct {
	// Sub[l] is the 3×3×3 submanifold map at level l.
	Sub []*kmap.Map
	// Down[l], l ≥ 1, is the stride-2 map from level l−1 to level l
	// (Down[0] is nil).
	Down []*kmap.Map
	// Up[l], l < Levels−1, is the inverse of Down[l+1]: level l+1 → l.
	Up []*kmap.Map
	// Head is the 1×1×1 submanifold map at level 0.
	Head *kmap.Map
}

// HostTableBytes returns the bytes of the neighbour tables of the maps that
// live on the host (built by package kmap): a device engine uploads each
// such table once, when a convolution first uses the map. Maps built on a
// device count nothing.
func (m *Maps) HostTableBytes() int64 {
	if m == nil {
		return 0
	}
	var n int64
	add := func(k *kmap.Map) {
		if k != nil && k.Source == nil {
			n += int64(k.NOut) * int64(k.V()) * 4
		}
	}
	for _, ks := range [][]*kmap.Map{m.Sub, m.Down, m.Up} {
		for _, k := range ks {
			add(k)
		}
	}
	add(m.Head)
	return n
}

// BuildMaps builds the maps of a batch whose coordinates (flat [N, 4],
// (batch, x, y, z)) lie in ext, for a network of the given depth.
func BuildMaps(coords []int32, ext grid.Extent, levels int) (*Maps, error) {
	if levels < 1 {
		return nil, fmt.Errorf("%w: %d levels", ErrConfig, levels)
	}
	mp := &Maps{Sub: make([]*kmap.Map, levels), Down: make([]*kmap.Map, levels), Up: make([]*kmap.Map, levels-1)}
	var err error
	if mp.Head, err = kmap.NewSubmanifold(coords, ext, [3]int{1, 1, 1}, [3]int{1, 1, 1}); err != nil {
		return nil, err
	}
	for l := range levels {
		if l > 0 {
			if mp.Down[l], err = kmap.NewStrided(coords, ext, grid.Cube(2, 2, 0, 1), nil); err != nil {
				return nil, err
			}
			if mp.Up[l-1], err = kmap.NewInverse(mp.Down[l]); err != nil {
				return nil, err
			}
			coords, ext = mp.Down[l].OutCoords, mp.Down[l].Out
		}
		if mp.Sub[l], err = kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1}); err != nil {
			return nil, err
		}
	}
	return mp, nil
}

// Net is the graph of one batch: the parameter nodes (learnables, in the
// model's order), their values and the logits node [N, Classes].
type Net struct {
	Graph      *gorgonia.ExprGraph
	Learnables gorgonia.Nodes
	Values     []*tensor.Dense
	// Input is the features node [N, InChannels].
	Input  *gorgonia.Node
	Logits *gorgonia.Node
}

// Build adds the network applied to features x [N, InChannels] over the
// batch's maps to a new graph. x lives where the model computes (see
// Place; on a device: inside an open step, from Device.Input).
func (m *Model) Build(x *tensor.Dense, maps *Maps) (*Net, error) {
	if x == nil || x.Dims() != 2 || x.Shape()[1] != m.Config.InChannels {
		return nil, fmt.Errorf("%w: features must be [N, %d]", ErrConfig, m.Config.InChannels)
	}
	net, err := m.BuildFor(x.Shape()[0], maps)
	if err != nil {
		return nil, err
	}
	if err := gorgonia.Let(net.Input, x); err != nil {
		return nil, fmt.Errorf("unet: binding the features: %w", err)
	}
	return net, nil
}

// BuildFor adds the network for a batch of n voxels to a new graph whose
// input node (Net.Input, [n, InChannels]) has no value yet: the graph can
// be built and compiled before the features exist (for example while the
// device still works on the previous step), and the features bound with
// gorgonia.Let before it runs.
func (m *Model) BuildFor(n int, maps *Maps) (*Net, error) {
	cfg := m.Config
	if maps == nil || len(maps.Sub) != cfg.Levels {
		return nil, fmt.Errorf("%w: maps for %d levels, model has %d", ErrConfig, mapsLevels(maps), cfg.Levels)
	}
	if n < 0 {
		return nil, fmt.Errorf("%w: %d voxels", ErrConfig, n)
	}
	g := gorgonia.NewGraph()
	net := &Net{Graph: g}
	p := make(map[string]*gorgonia.Node, len(m.Params))
	net.Values = m.paramValues()
	for i, prm := range m.Params {
		v := net.Values[i]
		s := v.Shape()
		n := gorgonia.NewTensor(g, cfg.DType, s.Dims(), gorgonia.WithShape(s.Clone()...), gorgonia.WithName(prm.Name), gorgonia.WithValue(v))
		p[prm.Name] = n
		net.Learnables = append(net.Learnables, n)
	}
	in := gorgonia.NewMatrix(g, cfg.DType, gorgonia.WithShape(n, cfg.InChannels), gorgonia.WithName("x"))
	net.Input = in

	algo := ops.WithAlgorithm(cfg.Algorithm)
	var err error
	// convNormRelu applies a convolution, then VoxelNorm and ReLU as one
	// fused op (ops.WithReLU: the bits of VoxelNorm followed by ReLU, in
	// fewer device passes); the parameters are <name>.<conv>.weight and
	// <name>.<norm>.gamma/beta. Every step checks err first.
	type convFn func(x, w *gorgonia.Node, m *kmap.Map, opts ...ops.ConvOption) (*gorgonia.Node, error)
	convNormRelu := func(f convFn, h *gorgonia.Node, name, conv, norm string, mp *kmap.Map) *gorgonia.Node {
		if err != nil {
			return nil
		}
		if h, err = f(h, p[name+"."+conv+".weight"], mp, algo); err != nil {
			return nil
		}
		h, err = ops.VoxelNorm(h, p[name+"."+norm+".gamma"], p[name+"."+norm+".beta"], cfg.Eps, ops.WithReLU())
		return h
	}
	block := func(h *gorgonia.Node, name string, mp *kmap.Map) *gorgonia.Node {
		for j := 1; j <= cfg.Convs; j++ {
			h = convNormRelu(ops.SubMConv3d, h, name, fmt.Sprintf("conv%d", j), fmt.Sprintf("norm%d", j), mp)
		}
		return h
	}

	skips := make([]*gorgonia.Node, cfg.Levels)
	h := block(in, "enc0", maps.Sub[0])
	skips[0] = h
	for l := 1; l < cfg.Levels; l++ {
		h = convNormRelu(ops.SparseConv3d, h, fmt.Sprintf("down%d", l), "conv", "norm", maps.Down[l])
		h = block(h, fmt.Sprintf("enc%d", l), maps.Sub[l])
		skips[l] = h
	}
	for l := cfg.Levels - 2; l >= 0; l-- {
		h = convNormRelu(ops.InverseConv3d, h, fmt.Sprintf("up%d", l), "conv", "norm", maps.Up[l])
		if err == nil {
			h, err = ops.ConcatChannels(h, skips[l])
		}
		h = block(h, fmt.Sprintf("dec%d", l), maps.Sub[l])
	}
	if err == nil {
		net.Logits, err = ops.SubMConv3d(h, p["head.weight"], maps.Head, algo, ops.WithBias(p["head.bias"]))
	}
	if err != nil {
		return nil, fmt.Errorf("unet: building the graph: %w", err)
	}
	return net, nil
}

func mapsLevels(m *Maps) int {
	if m == nil {
		return 0
	}
	return len(m.Sub)
}
