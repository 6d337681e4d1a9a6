package device_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/flexgemm-go/flexgemm/cudaext"
	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func openFake(t testing.TB, opts ...device.Option) *device.Device {
	t.Helper()
	d, err := device.OpenFake(opts...)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

func hostF32(v ...float32) *tensor.Dense {
	return tensor.New(tensor.WithShape(len(v)), tensor.WithBacking(v))
}

func download(t testing.TB, d *device.Device, v gorgonia.Value) []float32 {
	t.Helper()
	h, err := d.ToHost(v, device.Other)
	require.NoError(t, err)
	return append([]float32(nil), h.Data().([]float32)...)
}

// kside runs kernels on one device and reads results back (the GPU tests,
// and the Fake's where they need it).
type kside struct {
	t testing.TB
	d *device.Device
}

func (k kside) up(h []float32, rows, cols int, dt sparse.DType) sparse.Matrix {
	m, err := k.d.Upload(sparse.Matrix{Rows: rows, Cols: cols, Data: h}, dt, device.Other)
	require.NoError(k.t, err)
	return m
}

func (k kside) upI(h []int32) sparse.Matrix {
	m, err := k.d.Upload(sparse.Matrix{Rows: len(h), Cols: 1, Data: h}, sparse.Int32, device.Other)
	require.NoError(k.t, err)
	return m
}

func (k kside) alloc(dt sparse.DType, rows, cols int) sparse.Matrix {
	m, err := k.d.Alloc(dt, rows, cols)
	require.NoError(k.t, err)
	return m
}

func (k kside) run(f func(device.NN) error) {
	require.NoError(k.t, k.d.Run("test", f))
}

func (k kside) down(m sparse.Matrix) []float32 {
	h, err := k.d.Download(m, device.Other)
	require.NoError(k.t, err)
	return h.F32()
}

func (k kside) downI(m sparse.Matrix) []int32 {
	h, err := k.d.Download(m, device.Other)
	require.NoError(k.t, err)
	return h.I32()
}

// TestHostAccessFaults reads a device tensor's data on the host in a child
// process: the read must fault (the handle range has no access rights), so
// such a bug in Gorgonia glue cannot go unnoticed.
func TestHostAccessFaults(t *testing.T) {
	if os.Getenv("DEVICE_TEST_FAULT_CHILD") == "1" {
		d, err := device.OpenFake()
		if err != nil {
			os.Exit(3)
		}
		dv, err := d.ToDevice(hostF32(1, 2, 3))
		if err != nil {
			os.Exit(3)
		}
		v := dv.Data().([]float32)[1] // must fault
		println("read", v)
		os.Exit(0)
	}
	if !device.Protected() {
		t.Skipf("host access to device tensors is only caught on Linux (GOOS=%s)", runtime.GOOS)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostAccessFaults$")
	cmd.Env = append(os.Environ(), "DEVICE_TEST_FAULT_CHILD=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "the child must crash, got %v: %s", err, out)
	require.NotEqual(t, 3, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), "fault", "%s", out)
	require.NotContains(t, string(out), "read ")
}

func TestToDeviceRoundTrip(t *testing.T) {
	d := openFake(t)
	for _, tc := range []struct {
		name string
		in   *tensor.Dense
		dt   sparse.DType
		want []float32
	}{
		{"float32", tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1.5, -2, 3, 1e-8})), sparse.Float32, []float32{1.5, -2, 3, 1e-8}},
		{"float64", tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{0.1, 2, -3})), sparse.Float32, []float32{0.1, 2, -3}},
		{"bfloat16", hostF32(1.00390625, 3), sparse.BFloat16, []float32{1, 3}},
		{"float16", hostF32(1.00048828125, 65520), sparse.Float16, []float32{1, float32(math.Inf(1))}},
		{"empty", tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(0, 4)), sparse.Float32, []float32{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dv, err := d.ToDeviceAs(tc.in, tc.dt, device.Other)
			require.NoError(t, err)
			require.True(t, device.IsDevice(dv))
			require.Equal(t, tensor.Float32, dv.Dtype())
			require.Equal(t, tc.in.Shape(), dv.Shape())
			require.False(t, dv.IsNativelyAccessible())
			dt, err := device.StorageDType(dv)
			require.NoError(t, err)
			require.Equal(t, tc.dt, dt)
			h, err := d.ToHost(dv, device.Other)
			require.NoError(t, err)
			require.Equal(t, tc.in.Shape(), h.Shape())
			if len(tc.want) == 0 {
				require.Zero(t, h.Shape().TotalSize())
				return
			}
			require.Equal(t, tc.want, h.Data().([]float32))
			require.NoError(t, d.Free(dv))
			_, err = device.Of(dv)
			require.ErrorIs(t, err, device.ErrReleased)
		})
	}
	_, err := d.ToDevice(tensor.New(tensor.WithShape(2), tensor.WithBacking([]int64{1, 2})))
	require.ErrorIs(t, err, sparse.ErrDType)
}

// TestRoundToMatchesCUDA checks the rounding of the emulation against the
// CUDA engine's host conversions (round to nearest even, subnormals,
// overflow, NaN).
func TestRoundToMatchesCUDA(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	vals := []float32{0, -0, 1, -1, 65504, 65520, 1e-8, 6e-8, 3e-8, 1e-40, float32(math.Inf(1)), float32(math.NaN()), 1.00048828125, 1.00146484375}
	for range 20000 {
		vals = append(vals, float32(rng.NormFloat64()*math.Pow(2, float64(rng.IntN(60)-30))))
	}
	for _, v := range vals {
		h := device.RoundTo(sparse.Float16, v)
		b := device.RoundTo(sparse.BFloat16, v)
		wh := cudaext.HalfBitsToFloat32(cudaext.Float32ToHalfBits(v))
		wb := cudaext.BFloat16BitsToFloat32(cudaext.Float32ToBFloat16Bits(v))
		if math.IsNaN(float64(v)) {
			require.True(t, math.IsNaN(float64(h)) && math.IsNaN(float64(b)))
			continue
		}
		require.Equal(t, math.Float32bits(wh), math.Float32bits(h), "float16 of %g", v)
		require.Equal(t, math.Float32bits(wb), math.Float32bits(b), "bfloat16 of %g", v)
	}
	require.Equal(t, float32(1.5), device.RoundTo(sparse.Float32, 1.5))
}

func TestStepLifecycle(t *testing.T) {
	f := device.NewFake()
	d, err := device.OpenFakeWith(f)
	require.NoError(t, err)
	defer d.Close()
	keep, err := d.ToDevice(hostF32(1, 2))
	require.NoError(t, err)
	base := f.Stats().InUse

	st, err := d.BeginStep()
	require.NoError(t, err)
	_, err = d.BeginStep()
	require.ErrorIs(t, err, device.ErrStep)
	require.NotZero(t, d.StepID())
	tmp, err := d.Zeros(sparse.Float32, 10)
	require.NoError(t, err)
	kept, err := d.Zeros(sparse.BFloat16, 3)
	require.NoError(t, err)
	require.NoError(t, d.Keep(kept))
	raw, err := d.Alloc(sparse.Float16, 4, 4)
	require.NoError(t, err)
	_ = raw
	p, s := d.LiveTensors()
	require.Equal(t, 2, p)
	require.Equal(t, 2, s) // tmp and the raw matrix
	require.NoError(t, st.End())
	require.ErrorIs(t, st.End(), device.ErrStep)
	require.Zero(t, d.StepID())

	_, err = device.Of(tmp)
	require.ErrorIs(t, err, device.ErrReleased)
	_, _, err = device.MatrixOf(tmp, 10, 1)
	require.ErrorIs(t, err, device.ErrReleased)
	require.Equal(t, []float32{0, 0, 0}, download(t, d, kept))
	require.Equal(t, []float32{1, 2}, download(t, d, keep))
	require.Equal(t, base+3*2, f.Stats().InUse)

	require.NoError(t, d.Close())
	require.Zero(t, f.Stats().InUse)
	_, err = d.BeginStep()
	require.ErrorIs(t, err, device.ErrClosed)
}

// TestOutOfMemory fills a fake device with a capacity: the error names
// the device, the request and the memory in use.
func TestOutOfMemory(t *testing.T) {
	d, err := device.OpenFakeWith(device.NewFake(device.WithCapacity(1 << 20)))
	require.NoError(t, err)
	defer d.Close()
	_, err = d.Alloc(sparse.Float32, 512, 1024) // 2 MiB
	require.ErrorIs(t, err, device.ErrOutOfMemory)
	require.Contains(t, err.Error(), "2097152 bytes")
	require.Contains(t, err.Error(), "[512, 1024] float32")

	// Inside a graph: a convolution whose output does not fit.
	cfg := netConfig{in: 16, width: 64, levels: 1, classes: 2}
	b := makeBatch(t, cfg, 600, 12, 3)
	ps := newParams(cfg, 1)
	params := make([]*tensor.Dense, len(ps))
	for i, p := range ps {
		params[i] = tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(p.t.Shape()...))
	}
	small, err := device.OpenFakeWith(device.NewFake(device.WithCapacity(256 << 10)))
	require.NoError(t, err)
	defer small.Close()
	st, err := small.BeginStep()
	require.NoError(t, err)
	defer st.End()
	for i := range params {
		params[i], err = small.ToDevice(params[i])
		require.NoError(t, err)
	}
	x, err := small.Input(b.x)
	require.NoError(t, err)
	nt, err := buildNet(cfg, params, x, b)
	require.NoError(t, err)
	vm := gorgonia.NewTapeMachine(nt.g, small.VMOpt())
	defer vm.Close()
	err = vm.RunAll()
	require.Error(t, err)
	require.Contains(t, err.Error(), device.ErrOutOfMemory.Error())
	require.Contains(t, err.Error(), "bytes")
}

// TestBuiltinsOnDevice: Gorgonia's built-in Add works on device tensors
// through the device engine; Rectify and Concat fail with an error
// instead of touching device memory.
func TestBuiltinsOnDevice(t *testing.T) {
	d := openFake(t)
	a, err := d.ToDevice(tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{1, -2, 3, -4})))
	require.NoError(t, err)
	b, err := d.ToDevice(tensor.New(tensor.WithShape(2, 2), tensor.WithBacking([]float32{10, 20, 30, 40})))
	require.NoError(t, err)

	g := gorgonia.NewGraph()
	an := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(2, 2), gorgonia.WithValue(a), gorgonia.WithName("a"))
	bn := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(2, 2), gorgonia.WithValue(b), gorgonia.WithName("b"))
	sum := gorgonia.Must(gorgonia.Add(an, bn))
	var read gorgonia.Value
	gorgonia.Read(sum, &read)
	vm := gorgonia.NewTapeMachine(g, d.VMOpt())
	require.NoError(t, vm.RunAll())
	vm.Close()
	require.Equal(t, []float32{11, 18, 33, 36}, download(t, d, sum.Value()))
	require.True(t, device.IsDevice(read), "gorgonia.Read of a device node gives a device tensor")
	require.Equal(t, []float32{11, 18, 33, 36}, download(t, d, read))

	for name, build := range map[string]func(x, y *gorgonia.Node) (*gorgonia.Node, error){
		"ops.ReLU":           func(x, _ *gorgonia.Node) (*gorgonia.Node, error) { return gorgonia.Rectify(x) },
		"ops.ConcatChannels": func(x, y *gorgonia.Node) (*gorgonia.Node, error) { return gorgonia.Concat(1, x, y) },
	} {
		t.Run(name, func(t *testing.T) {
			g := gorgonia.NewGraph()
			x := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(2, 2), gorgonia.WithValue(a), gorgonia.WithName("a"))
			y := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(2, 2), gorgonia.WithValue(b), gorgonia.WithName("b"))
			_, err := build(x, y)
			require.NoError(t, err)
			vm := gorgonia.NewTapeMachine(g, d.VMOpt())
			defer vm.Close()
			err = vm.RunAll()
			require.Error(t, err)
			require.Contains(t, err.Error(), device.ErrUnsupported.Error())
			require.Contains(t, err.Error(), name, "the error names the replacement")
		})
	}
}

// TestEngineCloneAndMemory covers the tensor.Engine methods on device
// memory: Clone (device to device), Memset, Memclr.
func TestEngineCloneAndMemory(t *testing.T) {
	d := openFake(t, device.WithActivations(sparse.BFloat16))
	a, err := d.Input(hostF32(1.5, 2.25, -3))
	require.NoError(t, err)
	c := a.Clone().(*tensor.Dense)
	require.True(t, device.IsDevice(c))
	require.Equal(t, []float32{1.5, 2.25, -3}, download(t, d, c))
	// tensor.Dense.Memset refuses inaccessible data; the engine's
	// Memset/Memclr (what tensor calls for manually managed memory) work.
	require.Error(t, c.Memset(float32(7)))
	require.NoError(t, d.Engine().Memset(c, float32(7)))
	require.Equal(t, []float32{7, 7, 7}, download(t, d, c))
	d.Engine().Memclr(c)
	require.Equal(t, []float32{0, 0, 0}, download(t, d, c))
	require.Equal(t, []float32{1.5, 2.25, -3}, download(t, d, a))
	_, err = d.Engine().Accessible(c)
	require.ErrorIs(t, err, device.ErrUnsupported)
	require.Equal(t, gorgonia.StandardEngine{}, device.Host().Engine())
}

func TestMixedDevices(t *testing.T) {
	d1, d2 := openFake(t), openFake(t)
	a, err := d1.ToDevice(hostF32(1, 2))
	require.NoError(t, err)
	b, err := d2.ToDevice(hostF32(3, 4))
	require.NoError(t, err)
	_, err = tensor.Add(a, b)
	require.ErrorIs(t, err, device.ErrMixed)
	_, err = d1.ToHost(b, device.Other)
	require.ErrorIs(t, err, device.ErrMixed)
	_, err = tensor.Add(a, hostF32(1, 1))
	require.Error(t, err)
	_, err = d1.ToDevice(a)
	require.ErrorIs(t, err, device.ErrMixed)
	require.ErrorIs(t, d1.Free(b), device.ErrMixed)
}

// TestEngineAddOptions exercises the device Add with WithReuse, WithIncr
// and UseUnsafe, as Gorgonia's VM calls it.
func TestEngineAddOptions(t *testing.T) {
	d := openFake(t)
	mk := func(v ...float32) *tensor.Dense {
		x, err := d.ToDevice(hostF32(v...))
		require.NoError(t, err)
		return x
	}
	a, b := mk(1, 2), mk(10, 20)
	r := mk(0, 0)
	out, err := tensor.Add(a, b, tensor.WithReuse(r))
	require.NoError(t, err)
	require.Same(t, r, out)
	require.Equal(t, []float32{11, 22}, download(t, d, r))
	inc := mk(100, 100)
	_, err = tensor.Add(a, b, tensor.WithIncr(inc))
	require.NoError(t, err)
	require.Equal(t, []float32{111, 122}, download(t, d, inc))
	_, err = tensor.Add(a, b, tensor.UseUnsafe())
	require.NoError(t, err)
	require.Equal(t, []float32{11, 22}, download(t, d, a))
	_, err = tensor.Add(a, mk(1, 2, 3))
	require.Error(t, err)
	host := hostF32(0, 0)
	_, err = tensor.Add(a, b, tensor.WithReuse(host))
	require.ErrorIs(t, err, device.ErrMixed)
}

// TestAdamMatchesGorgonia runs three Adam steps with Gorgonia's solver,
// this package's host path and a fake device, from the same gradients.
func TestAdamMatchesGorgonia(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	w0 := make([]float32, 40)
	gs := make([][]float32, 3)
	for i := range w0 {
		w0[i] = float32(rng.NormFloat64())
	}
	for k := range gs {
		gs[k] = make([]float32, 40)
		for i := range gs[k] {
			gs[k][i] = float32(rng.NormFloat64())
		}
	}
	// Gorgonia's AdamSolver.
	gw := tensor.New(tensor.WithShape(8, 5), tensor.WithBacking(append([]float32(nil), w0...)))
	solver := gorgonia.NewAdamSolver(gorgonia.WithLearnRate(0.01))
	for k := range gs {
		gt := tensor.New(tensor.WithShape(8, 5), tensor.WithBacking(append([]float32(nil), gs[k]...)))
		require.NoError(t, solver.Step([]gorgonia.ValueGrad{valueGrad{gw, gt}}))
	}
	// Host and fake-device paths of Adam.
	hw := tensor.New(tensor.WithShape(8, 5), tensor.WithBacking(append([]float32(nil), w0...)))
	d := openFake(t)
	dw, err := d.ToDevice(hw.Clone().(*tensor.Dense))
	require.NoError(t, err)
	ha, da := device.NewAdam(0.01), device.NewAdam(0.01)
	for k := range gs {
		gt := tensor.New(tensor.WithShape(8, 5), tensor.WithBacking(append([]float32(nil), gs[k]...)))
		require.NoError(t, ha.Step([]*tensor.Dense{hw}, []gorgonia.Value{gt}, 1))
		// On the device the gradient is scaled by 4 and unscaled by Adam.
		for i := range gs[k] {
			gs[k][i] *= 4
		}
		dg, err := d.ToDeviceAs(tensor.New(tensor.WithShape(8, 5), tensor.WithBacking(gs[k])), sparse.Float32, device.Other)
		require.NoError(t, err)
		require.NoError(t, da.Step([]*tensor.Dense{dw}, []gorgonia.Value{dg}, 0.25))
	}
	require.Equal(t, 3, da.Iterations())
	want := gw.Data().([]float32)
	require.InDeltaSlice(t, want, hw.Data().([]float32), 1e-6)
	require.Equal(t, hw.Data().([]float32), download(t, d, dw), "device and host Adam agree bit for bit")

	require.Error(t, da.Step([]*tensor.Dense{dw, dw}, []gorgonia.Value{dw}, 1))
	require.Error(t, da.Step([]*tensor.Dense{dw}, []gorgonia.Value{nil}, 1))
	half, err := d.ToDeviceAs(hostF32(1, 2), sparse.BFloat16, device.Params)
	require.NoError(t, err)
	require.ErrorIs(t, device.NewAdam(1).Step([]*tensor.Dense{half}, []gorgonia.Value{half}, 1), sparse.ErrDType)
}

type valueGrad struct{ v, g *tensor.Dense }

func (vg valueGrad) Value() gorgonia.Value         { return vg.v }
func (vg valueGrad) Grad() (gorgonia.Value, error) { return vg.g, nil }

// TestLossScalerSkipsOverflow checks dynamic loss scaling: a step with an
// infinite gradient is skipped and halves the scale; good steps apply
// the update and, after Interval of them, double it.
func TestLossScalerSkipsOverflow(t *testing.T) {
	d := openFake(t)
	w, err := d.ToDevice(hostF32(1, 1))
	require.NoError(t, err)
	grad := func(v ...float32) gorgonia.Value {
		g, err := d.ToDeviceAs(hostF32(v...), sparse.Float16, device.Other)
		require.NoError(t, err)
		return g
	}
	opt := device.NewAdam(0.1)
	s := device.NewLossScaler(1024)
	s.Interval = 2
	before := d.Transfers()
	ok, err := s.Step(d, opt, []*tensor.Dense{w}, []gorgonia.Value{grad(float32(math.Inf(1)), 1)})
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, 512.0, s.Scale)
	require.Equal(t, 1, s.Skipped)
	require.Equal(t, []float32{1, 1}, download(t, d, w))
	xfer := d.Transfers().Sub(before)
	require.Equal(t, int64(4), xfer.Down[device.Scalars], "one flag read back")
	for range 2 {
		ok, err = s.Step(d, opt, []*tensor.Dense{w}, []gorgonia.Value{grad(512, -512)})
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.Equal(t, 1024.0, s.Scale)
	got := download(t, d, w)
	require.Less(t, got[0], float32(1))
	require.Greater(t, got[1], float32(1))
	ok, err = device.Host().AllFinite(hostF32(1, float32(math.NaN())))
	require.NoError(t, err)
	require.False(t, ok)
}

// TestProfileCategories trains one step with profiling on and checks the
// categories, with convolutions apart.
func TestProfileCategories(t *testing.T) {
	d := openFake(t)
	d.SetProfiling(true)
	cfg := smallNet
	b := makeBatch(t, cfg, 200, 9, 4)
	ps := newParams(cfg, 4)
	opt := device.NewAdam(1e-3)
	runStep(t, d, cfg, toDevice(t, d, ps), b, 1, opt, nil)
	d.SetProfiling(false)
	prof := d.Profile()
	// No "relu": the test UNet fuses its ReLUs into VoxelNorm ("norm").
	for _, cat := range []string{"conv", "norm", "concat", "loss", "add", "adam", "metrics"} {
		require.Greater(t, prof[cat].Calls, 0, "category %s: %v", cat, prof)
	}
	convs := 3*(2*cfg.levels-1) + 3 // forward, input and weight gradient per conv, bias gradient
	require.GreaterOrEqual(t, prof["conv"].Calls, convs)
	s := device.FormatProfile(prof)
	require.Contains(t, s, "conv ")
	require.Contains(t, s, "everything else")
	d.ResetProfile()
	require.Empty(t, d.Profile())
}

// TestTrainingLoopOnFake trains a few steps with Adam on a fake device and
// on the host from the same start: the parameters stay equal (float32),
// and the loss falls.
func TestTrainingLoopOnFake(t *testing.T) {
	cfg := netConfig{in: 2, width: 4, levels: 2, classes: 4}
	b := makeBatch(t, cfg, 150, 8, 5)
	ps := newParams(cfg, 5)
	d := openFake(t)
	hp, dp := toDevice(t, device.Host(), ps), toDevice(t, d, ps)
	ho, do := device.NewAdam(0.02), device.NewAdam(0.02)
	var first, last float64
	for k := range 6 {
		hr := runStep(t, device.Host(), cfg, hp, b, 1, ho, nil)
		dr := runStep(t, d, cfg, dp, b, 1, do, nil)
		require.InDelta(t, hr.loss, dr.loss, 1e-5*hr.loss, "step %d", k)
		if k == 0 {
			first = dr.loss
		}
		last = dr.loss
	}
	require.Less(t, last, first)
	for i := range hp {
		require.Less(t, relErr(download(t, d, dp[i]), hp[i].Data().([]float32)), 1e-5, ps[i].name)
	}
}

func TestOpenCUDAMessage(t *testing.T) {
	d, err := device.OpenCUDA(0)
	if err == nil {
		// Close it: a GPU holds one open Device, and the GPU tests after
		// this one open their own.
		require.NoError(t, d.Close())
		t.Skip("a GPU is present")
	}
	require.ErrorIs(t, err, device.ErrNoGPU)
	msg := err.Error()
	require.True(t, strings.Contains(msg, "cudaext build tag") || strings.Contains(msg, "CUDA"), msg)
	t.Log(msg)
}

func TestNewErrors(t *testing.T) {
	_, err := device.New(nil, nil)
	require.Error(t, err)
	_, err = device.OpenFake(device.WithActivations(sparse.Int32))
	require.ErrorIs(t, err, sparse.ErrDType)
	h := device.Host()
	require.True(t, h.IsHost())
	x := hostF32(1)
	y, err := h.ToDevice(x)
	require.NoError(t, err)
	require.Same(t, x, y)
	_, err = h.Alloc(sparse.Float32, 1, 1)
	require.ErrorIs(t, err, device.ErrNotDevice)
	_, err = device.Of(x)
	require.ErrorIs(t, err, device.ErrNotDevice)
}

// TestEmptyTensorsOnDevice runs the device paths of ReLU, ConcatChannels
// and VoxelNorm on tensors with no rows.
func TestEmptyTensorsOnDevice(t *testing.T) {
	d := openFake(t)
	empty, err := d.ToDevice(tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(0, 3)))
	require.NoError(t, err)
	gamma, err := d.ToDevice(hostF32(1, 1, 1))
	require.NoError(t, err)
	beta, err := d.ToDevice(hostF32(0, 0, 0))
	require.NoError(t, err)
	g := gorgonia.NewGraph()
	x := gorgonia.NewMatrix(g, tensor.Float32, gorgonia.WithShape(0, 3), gorgonia.WithValue(empty), gorgonia.WithName("x"))
	gn := gorgonia.NewVector(g, tensor.Float32, gorgonia.WithShape(3), gorgonia.WithValue(gamma), gorgonia.WithName("g"))
	bn := gorgonia.NewVector(g, tensor.Float32, gorgonia.WithShape(3), gorgonia.WithValue(beta), gorgonia.WithName("b"))
	y := gorgonia.Must(ops.ReLU(gorgonia.Must(ops.VoxelNorm(x, gn, bn, 1e-5))))
	c := gorgonia.Must(ops.ConcatChannels(y, x))
	vm := gorgonia.NewTapeMachine(g, d.VMOpt())
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	require.Equal(t, tensor.Shape{0, 6}, c.Value().Shape())
	require.True(t, device.IsDevice(c.Value()))
}

// TestHarmonizeAndMaster checks the mixed-precision helpers of the
// convolution ops: operands are cast to the activation dtype, parameter
// gradients come back in float32, host matrices are left alone.
func TestHarmonizeAndMaster(t *testing.T) {
	d := openFake(t)
	st, err := d.BeginStep()
	require.NoError(t, err)
	defer st.End()
	act, err := d.Upload(sparse.Matrix{Rows: 2, Cols: 2, Data: []float32{1, 2, 3, 4}}, sparse.BFloat16, device.Other)
	require.NoError(t, err)
	w, err := d.Upload(sparse.Matrix{Rows: 1, Cols: 3, Data: []float32{1.00390625, 2, 3}}, sparse.Float32, device.Other)
	require.NoError(t, err)
	zero := sparse.Matrix{}
	orig := w
	release, err := device.Harmonize(act, &w, &zero)
	require.NoError(t, err)
	dt, _ := w.DType()
	require.Equal(t, sparse.BFloat16, dt)
	require.True(t, zero.IsZero())
	h, err := d.Download(w, device.Other)
	require.NoError(t, err)
	require.Equal(t, []float32{1, 2, 3}, h.F32(), "rounded to bfloat16")
	release()
	_, err = d.Download(w, device.Other)
	require.ErrorIs(t, err, device.ErrReleased, "the cast copy is released")
	_, err = d.Download(orig, device.Other)
	require.NoError(t, err, "the original stays")

	m, err := device.Master(act)
	require.NoError(t, err)
	dt, _ = m.DType()
	require.Equal(t, sparse.Float32, dt)
	h, err = d.Download(m, device.Other)
	require.NoError(t, err)
	require.Equal(t, []float32{1, 2, 3, 4}, h.F32())
	host := sparse.Matrix{Rows: 1, Cols: 1, Data: []float32{5}}
	same, err := device.Master(host)
	require.NoError(t, err)
	require.Equal(t, host, same)
	release, err = device.Harmonize(host, &act)
	require.NoError(t, err)
	release()
	dt, _ = act.DType()
	require.Equal(t, sparse.BFloat16, dt, "a host activation changes nothing")
}

func TestOneDevicePerBackend(t *testing.T) {
	f := device.NewFake()
	d, err := device.OpenFakeWith(f)
	require.NoError(t, err)
	_, err = device.OpenFakeWith(f, device.WithActivations(sparse.BFloat16))
	require.ErrorIs(t, err, device.ErrMixed)
	require.NoError(t, d.Close())
	d2, err := device.OpenFakeWith(f, device.WithActivations(sparse.BFloat16))
	require.NoError(t, err)
	require.Equal(t, sparse.BFloat16, d2.Activations())
	require.NoError(t, d2.Close())
}

// TestAdamStepsMatchesAdamStep updates several parameters (one empty, the
// gradients in every float dtype) with one AdamSteps call and with one
// AdamStep per parameter on a fake device: the results agree bit for bit.
// It also runs Adam.Step on several device parameters against the host
// path, and checks AdamSteps' argument errors.
func TestAdamStepsMatchesAdamStep(t *testing.T) {
	d := openFake(t)
	rng := rand.New(rand.NewPCG(5, 1))
	sizes := []int{300, 0, 17, 64}
	gdts := []sparse.DType{sparse.Float32, sparse.Float32, sparse.Float16, sparse.BFloat16}
	up := func(h []float32, dt sparse.DType) sparse.Matrix {
		m, err := d.Upload(sparse.Matrix{Rows: len(h), Cols: 1, Data: h}, dt, device.Other)
		require.NoError(t, err)
		return m
	}
	rnd := func(n int, scale float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(scale * rng.NormFloat64())
		}
		return v
	}
	var ws, gs, ms, vs, w1, m1, v1 []sparse.Matrix
	for p, n := range sizes {
		w0, g0, m0 := rnd(n, 0.1), rnd(n, 1), rnd(n, 0.01)
		v0 := make([]float32, n)
		for i := range v0 {
			v0[i] = m0[i] * m0[i]
		}
		ws, w1 = append(ws, up(w0, sparse.Float32)), append(w1, up(w0, sparse.Float32))
		gs = append(gs, up(g0, gdts[p]))
		ms, m1 = append(ms, up(m0, sparse.Float32)), append(m1, up(m0, sparse.Float32))
		vs, v1 = append(vs, up(v0, sparse.Float32)), append(v1, up(v0, sparse.Float32))
	}
	require.NoError(t, d.Run("test", func(nn device.NN) error {
		for it := 1; it <= 3; it++ {
			c1 := float32(1 / (1 - math.Pow(0.9, float64(it))))
			c2 := float32(1 / (1 - math.Pow(0.999, float64(it))))
			if err := nn.AdamSteps(ws, gs, ms, vs, 1e-3, 0.9, 0.999, 1e-8, c1, c2, 0.5, 1e-4); err != nil {
				return err
			}
			for p := range sizes {
				if err := nn.AdamStep(w1[p], gs[p], m1[p], v1[p], 1e-3, 0.9, 0.999, 1e-8, c1, c2, 0.5, 1e-4); err != nil {
					return err
				}
			}
		}
		return nil
	}))
	down := func(m sparse.Matrix) []float32 {
		h, err := d.Download(m, device.Other)
		require.NoError(t, err)
		return h.F32()
	}
	for p, n := range sizes {
		for k, pair := range [][2]sparse.Matrix{{ws[p], w1[p]}, {ms[p], m1[p]}, {vs[p], v1[p]}} {
			got, want := down(pair[0]), down(pair[1])
			require.Len(t, got, n)
			require.Equal(t, want, got, "parameter %d, operand %d", p, k)
		}
	}

	// Argument errors: mismatched lists, a size mismatch, a float16 moment.
	require.NoError(t, d.Run("test", func(nn device.NN) error {
		require.ErrorIs(t, nn.AdamSteps(ws, gs[:1], ms, vs, 1, 0.9, 0.999, 1e-8, 1, 1, 1, 0), sparse.ErrShape)
		require.ErrorIs(t, nn.AdamSteps(ws[:1], gs[2:3], ms[:1], vs[:1], 1, 0.9, 0.999, 1e-8, 1, 1, 1, 0), sparse.ErrShape)
		require.ErrorIs(t, nn.AdamSteps(ws[2:3], gs[2:3], gs[2:3], vs[2:3], 1, 0.9, 0.999, 1e-8, 1, 1, 1, 0), sparse.ErrDType)
		require.NoError(t, nn.AdamSteps(nil, nil, nil, nil, 1, 0.9, 0.999, 1e-8, 1, 1, 1, 0))
		return nil
	}))
	before := down(ws[2])
	require.NoError(t, d.Run("test", func(nn device.NN) error {
		// A bad last parameter leaves the earlier ones untouched.
		err := nn.AdamSteps(ws[2:4], gs[2:4], ms[2:4], []sparse.Matrix{vs[2], gs[3]}, 1, 0.9, 0.999, 1e-8, 1, 1, 1, 0)
		require.Error(t, err)
		return nil
	}))
	require.Equal(t, before, down(ws[2]))

	// Adam.Step over several device parameters (one launch) against the
	// host path, three steps.
	var hp, dp []*tensor.Dense
	var hg, dg []gorgonia.Value
	for _, n := range []int{50, 3, 128} {
		w0, g0 := rnd(n, 0.1), rnd(n, 1)
		hw := hostF32(append([]float32(nil), w0...)...)
		dw, err := d.ToDevice(hostF32(w0...))
		require.NoError(t, err)
		gd, err := d.ToDeviceAs(hostF32(g0...), sparse.Float32, device.Other)
		require.NoError(t, err)
		hp, dp = append(hp, hw), append(dp, dw)
		hg, dg = append(hg, hostF32(g0...)), append(dg, gd)
	}
	ha, da := device.NewAdam(0.01), device.NewAdam(0.01)
	d.SetProfiling(true)
	for range 3 {
		require.NoError(t, ha.Step(hp, hg, 1))
		require.NoError(t, da.Step(dp, dg, 1))
	}
	prof := d.Profile()
	d.SetProfiling(false)
	require.Equal(t, 3, prof["adam"].Calls, "one device operation per Adam step for all parameters")
	for p := range hp {
		require.Equal(t, hp[p].Data().([]float32), download(t, d, dp[p]), "parameter %d", p)
	}
}

// TestConvParamGradsThroughProxy: sparse.ConvParamGrads on a device's
// matrices goes through the device's engine (timed under "conv", results
// on the device) and, on a backend without a one-pass version (the Fake),
// returns exactly ConvWeightGrad's and BiasGrad's results, in float32 and
// bfloat16 storage.
func TestConvParamGradsThroughProxy(t *testing.T) {
	d := openFake(t)
	coords, ext := synth.SphereShell(8, 1)
	m, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(12, 13))
	const ci, co = 5, 6
	for _, dt := range []sparse.DType{sparse.Float32, sparse.BFloat16} {
		st, err := d.BeginStep()
		require.NoError(t, err)
		k := kside{t, d}
		x := k.up(synth.Uniform[float32](rng, m.NIn*ci), m.NIn, ci, dt)
		dy := k.up(synth.Uniform[float32](rng, m.NOut*co), m.NOut, co, dt)
		d.SetProfiling(true)
		dw, db, err := sparse.ConvParamGrads(m, x, dy, sparse.ConvOptions{})
		require.NoError(t, err)
		d.SetProfiling(false)
		require.Greater(t, d.Profile()["conv"].Calls, 0, "timed under conv")
		d.ResetProfile()
		require.True(t, d.Owns(dw) && d.Owns(db), "results on the device")
		wantW, err := sparse.ConvWeightGrad(m, x, dy, sparse.ConvOptions{})
		require.NoError(t, err)
		wantB, err := sparse.BiasGrad(dy)
		require.NoError(t, err)
		require.Equal(t, [2]int{co, m.V() * ci}, [2]int{dw.Rows, dw.Cols}, dt)
		require.Equal(t, [2]int{1, co}, [2]int{db.Rows, db.Cols}, dt)
		require.Equal(t, k.down(wantW), k.down(dw), "%v weight gradient", dt)
		require.Equal(t, k.down(wantB), k.down(db), "%v bias gradient", dt)
		require.NoError(t, st.End())
	}
}
