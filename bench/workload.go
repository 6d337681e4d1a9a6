package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// The workloads (Record.Op).
const (
	opSubm   = "subm_conv"        // L submanifold 3×3×3 C→C layers (FlexGEMM's benchmark)
	opDown   = "sparse_conv_k2s2" // L strided 2×2×2 C→C layers, each halving the grid
	opSample = "grid_sample"      // trilinear grid sample at RES² sphere points per batch
)

var allOps = []string{opSubm, opDown, opSample}

// The modes (Record.Mode): FlexGEMM's training and inference steps, and two
// parts of the inference step that subm_conv also times on their own, so
// that -power can say where an inference step's energy goes (the anchor
// has no such rows).
const (
	modeTrain      = "train"       // forward + backward, kernel map built inside the step
	modeInfer      = "infer"       // forward only, kernel map built inside the step
	modeMap        = "map"         // the inference step's kernel-map build and derived tables alone
	modeInferNoMap = "infer_nomap" // the inference step's L convolutions over one map built before the timing
)

var allModes = []string{modeTrain, modeInfer, modeMap, modeInferNoMap}

// submOnlyModes are the modes only subm_conv defines.
var submOnlyModes = []string{modeMap, modeInferNoMap}

// scene is a voxel set to run on.
type scene struct {
	coords []int32
	ext    grid.Extent
	res    int    // reported as RES
	source string // "sphere" or a file name
}

// params selects one workload instance.
type params struct {
	op    string
	C, L  int
	dtype dtypeInfo
	conv  sparse.ConvOptions
	// paramsFirst computes each layer's weight and bias gradients before
	// its input gradient (-backward params-first).
	paramsFirst bool
	seed        uint64
	be          *backend   // where it runs
	maps        *mapSource // how its kernel maps are built (nil: on the host)
}

// workload is a ready-to-time instance: one step function per mode.
type workload struct {
	n     int
	pairs int64
	l     int // L as reported
	flops map[string]float64
	steps map[string]func() error
	// close frees the workload's inputs (features, weights, gradients).
	close func()
}

// hostMatrix returns a host [rows, cols] matrix of dt.host data filled by
// f.
func hostMatrix(dt dtypeInfo, rows, cols int, f func() float64) (sparse.Matrix, error) {
	switch dt.host {
	case sparse.Float32:
		d := make([]float32, rows*cols)
		for i := range d {
			d[i] = float32(f())
		}
		return sparse.Matrix{Rows: rows, Cols: cols, Data: d}, nil
	case sparse.Float64:
		d := make([]float64, rows*cols)
		for i := range d {
			d[i] = f()
		}
		return sparse.Matrix{Rows: rows, Cols: cols, Data: d}, nil
	}
	return sparse.Matrix{}, fmt.Errorf("dtype %s has no host storage", dt.name)
}

// holder collects the matrices a workload or a step makes, to free them
// together.
type holder struct {
	be   *backend
	made []sparse.Matrix
}

// keep records m (if err is nil) and passes both on.
func (h *holder) keep(m sparse.Matrix, err error) (sparse.Matrix, error) {
	if err == nil {
		h.made = append(h.made, m)
	}
	return m, err
}

// random returns a [rows, cols] matrix of dtype dt filled by f, placed on
// the backend's device.
func (h *holder) random(dt dtypeInfo, rows, cols int, f func() float64) (sparse.Matrix, error) {
	m, err := hostMatrix(dt, rows, cols, f)
	if err != nil {
		return m, err
	}
	return h.keep(h.be.place(m, dt))
}

// filled returns a [rows, cols] matrix of dtype dt with every element v.
func (h *holder) filled(dt dtypeInfo, rows, cols int, v float64) (sparse.Matrix, error) {
	return h.keep(h.be.fill(dt, rows, cols, v))
}

// release frees everything recorded.
func (h *holder) release() {
	h.be.free(h.made...)
	h.made = nil
}

func normal(rng *rand.Rand, scale float64) func() float64 {
	return func() float64 { return rng.NormFloat64() * scale }
}

func constant(v float64) func() float64 { return func() float64 { return v } }

// layerParams returns L weights [C, V·C] scaled by 1/√(V·C) and L biases
// [1, C], like the anchor script.
func layerParams(h *holder, p params, V int, rng *rand.Rand) (ws, bs []sparse.Matrix, err error) {
	for range p.L {
		w, err := h.random(p.dtype, p.C, V*p.C, normal(rng, 1/math.Sqrt(float64(V*p.C))))
		if err != nil {
			return nil, nil, err
		}
		b, err := h.random(p.dtype, 1, p.C, normal(rng, 1))
		if err != nil {
			return nil, nil, err
		}
		ws, bs = append(ws, w), append(bs, b)
	}
	return ws, bs, nil
}

func newWorkload(sc scene, p params) (*workload, error) {
	if p.C < 1 || p.L < 1 {
		return nil, fmt.Errorf("C=%d and L=%d must be positive", p.C, p.L)
	}
	if p.be == nil {
		p.be = cpuBackend()
	}
	if p.maps == nil {
		p.maps = hostMaps(sc, kmapCPU, func(*kmap.Map) {})
	}
	switch p.op {
	case opSubm:
		return submWorkload(sc, p)
	case opDown:
		return downWorkload(sc, p)
	case opSample:
		if p.be.name != deviceCPU {
			return nil, fmt.Errorf("%s runs on the CPU only (its plan is built on the host)", opSample)
		}
		return sampleWorkload(sc, p)
	}
	return nil, fmt.Errorf("unknown op %q (want one of %v)", p.op, allOps)
}

// convStack runs L convolutions over maps (one per layer) forward and, if
// train, backward with an all-ones gradient that ones makes after the
// forward pass (the anchor's torch.ones_like(h): made in every training
// step, absent from inference); layer 0 gets no input gradient. Matrices
// are freed when the anchor's PyTorch frees its tensors: the output, the
// all-ones gradient and the weight and bias gradients go to h (the caller
// frees them at the end of the step; the anchor keeps its h, the argument
// of h.backward and each .grad that long); each intermediate activation is
// freed once its layer's backward pass is done with it and each
// intermediate gradient once the layer below has read it, as autograd
// frees saved tensors and gradients; inference frees each intermediate
// output as soon as the next layer has read it, as the anchor's h = conv(h)
// drops it. Within a layer the input gradient comes first, then the weight
// and bias gradients, as in FlexGEMM's backward (grad_input, then
// grad_weight): what the input gradient holds while it runs (a transposed
// weight, split-K partials) is freed before the layer's weight gradient is
// allocated. paramsFirst reverses that (-backward params-first). On the
// CUDA engine the weight and bias gradients of small maps run on a side
// stream beside the next input gradient queued (Device.onSide, doBeside):
// in the default order a layer's parameter gradients overlap the input
// gradient of the layer below, in the other its own.
func convStack(h *holder, maps []*kmap.Map, x sparse.Matrix, ws, bs []sparse.Matrix, ones func(*holder) (sparse.Matrix, error), opt sparse.ConvOptions, train, paramsFirst bool) error {
	L := len(ws)
	if !train {
		return inferStack(h, maps, x, ws, bs, opt)
	}
	// acts[l] is layer l's input (acts[0] = x, the caller's), acts[L] the
	// output; dy is the gradient of the layer's output, made here when
	// madeDy. What the step has not freed yet is freed on return.
	acts := make([]sparse.Matrix, L+1)
	acts[0] = x
	var dy sparse.Matrix
	madeDy := false
	defer func() {
		h.be.free(acts[1:L]...)
		if madeDy {
			h.be.free(dy)
		}
	}()
	var err error
	for l := range L {
		h.be.phasef("fwd L%d", l)
		if acts[l+1], err = sparse.Conv(maps[l], acts[l], ws[l], bs[l], opt); err != nil {
			return fmt.Errorf("layer %d forward: %w", l, err)
		}
	}
	h.keep(acts[L], nil)
	h.be.phase("ones")
	if dy, err = ones(h); err != nil {
		return fmt.Errorf("output gradient: %w", err)
	}
	// paramGrads computes layer l's weight and bias gradients in one call
	// (sparse.ConvParamGrads: the CUDA engine sums the bias gradient in the
	// weight gradient's kernel where it can).
	paramGrads := func(l int) error {
		h.be.phasef("wgrad L%d", l)
		dw, db, err := sparse.ConvParamGrads(maps[l], acts[l], dy, opt)
		if err != nil {
			return fmt.Errorf("layer %d weight and bias gradients: %w", l, err)
		}
		h.keep(dw, nil)
		h.keep(db, nil)
		return nil
	}
	for l := L - 1; l >= 0; l-- {
		if paramsFirst || l == 0 {
			if err := paramGrads(l); err != nil {
				return err
			}
		}
		if l == 0 {
			break
		}
		h.be.phasef("dgrad L%d", l)
		dx, err := sparse.ConvInputGrad(maps[l], dy, ws[l], opt)
		if err != nil {
			return fmt.Errorf("layer %d input gradient: %w", l, err)
		}
		if !paramsFirst {
			if err := paramGrads(l); err != nil {
				h.be.free(dx)
				return err
			}
		}
		if madeDy {
			h.be.free(dy)
		}
		dy, madeDy = dx, true
		h.be.free(acts[l])
		acts[l] = sparse.Matrix{}
	}
	return nil
}

// inferStack is convStack's forward-only pass: layer l's output is freed
// once layer l + 1 has been computed from it, and the last one goes to h.
func inferStack(h *holder, maps []*kmap.Map, x sparse.Matrix, ws, bs []sparse.Matrix, opt sparse.ConvOptions) error {
	y := x
	for l := range ws {
		h.be.phasef("fwd L%d", l)
		next, err := sparse.Conv(maps[l], y, ws[l], bs[l], opt)
		if l > 0 {
			h.be.free(y) // made by layer l − 1, read by this one
		}
		if err != nil {
			return fmt.Errorf("layer %d forward: %w", l, err)
		}
		y = next
	}
	_, err := h.keep(y, nil)
	return err
}

var (
	kernel3   = [3]int{3, 3, 3}
	dilation1 = [3]int{1, 1, 1}
)

// countPairs returns the active (output, input) pairs of m: its
// non-negative Nbr entries (m.Pairs().Count() without building the lists).
// A map built on a device is loaded first (kmap.Map.Load: its table is
// downloaded once, when the workload is set up, never in a timed step).
func countPairs(m *kmap.Map) (int64, error) {
	if err := m.Load(); err != nil {
		return 0, fmt.Errorf("counting the kernel map's pairs: %w", err)
	}
	var n int64
	for _, v := range m.Nbr {
		if v >= 0 {
			n++
		}
	}
	return n, nil
}

// stepFunc returns a step: build the maps of every layer, run body on them,
// then free what the step made and drop the maps' device tables, also on
// failure.
func stepFunc(p params, build func() ([]*kmap.Map, error), body func(h *holder, maps []*kmap.Map) error) func() error {
	return func() error {
		p.be.phase("map")
		maps, err := build()
		defer func() {
			var seen []*kmap.Map
			for _, m := range maps {
				if m != nil && !slices.Contains(seen, m) {
					seen = append(seen, m)
					p.maps.release(m)
				}
			}
		}()
		if err != nil {
			return err
		}
		h := &holder{be: p.be}
		defer h.release()
		err = body(h, maps)
		p.be.phase("release")
		return err
	}
}

// useFor returns the derived tables a layer reads: the input-gradient
// tables only where dgrad (layers above 0) runs.
func useFor(p params, train, dgrad bool) tableUse {
	return tablesFor(p.be.resolve(p.conv.Algorithm), train, dgrad)
}

func submWorkload(sc scene, p params) (_ *workload, err error) {
	m, err := p.maps.submanifold()
	if err != nil {
		return nil, err
	}
	pairs, err := countPairs(m)
	p.maps.release(m)
	if err != nil {
		return nil, err
	}
	n, V := m.NIn, m.V()
	inputs := &holder{be: p.be}
	defer func() {
		if err != nil {
			inputs.release()
		}
	}()
	rng := rand.New(rand.NewPCG(p.seed, 1))
	x, err := inputs.random(p.dtype, n, p.C, normal(rng, 1))
	if err != nil {
		return nil, err
	}
	ws, bs, err := layerParams(inputs, p, V, rng)
	if err != nil {
		return nil, err
	}
	ones := func(h *holder) (sparse.Matrix, error) { return h.filled(p.dtype, n, p.C, 1) }
	// buildFor returns a step's map build: one map serves every layer, so
	// it needs the input-gradient tables when a layer above 0 exists. On
	// a failed prepare the maps come back with the error, to be released.
	buildFor := func(train bool) func() ([]*kmap.Map, error) {
		use := useFor(p, train, p.L > 1)
		return func() ([]*kmap.Map, error) {
			m, err := p.maps.submanifold()
			if err != nil {
				return nil, err
			}
			maps := make([]*kmap.Map, p.L)
			for l := range maps {
				maps[l] = m
			}
			p.be.phase("derive")
			return maps, p.maps.prepare(m, use)
		}
	}
	step := func(train bool) func() error {
		return stepFunc(p, buildFor(train), func(h *holder, maps []*kmap.Map) error {
			return convStack(h, maps, x, ws, bs, ones, p.conv, train, p.paramsFirst)
		})
	}
	// mapOnly is an inference step's map phase and nothing else: build,
	// derive, release.
	mapOnly := stepFunc(p, buildFor(false), func(*holder, []*kmap.Map) error { return nil })
	// noMap runs an inference step's convolutions over one map, built and
	// prepared on the first call and kept until the workload closes.
	var kept []*kmap.Map
	noMap := func() error {
		if kept == nil {
			maps, err := buildFor(false)()
			if err != nil {
				if maps != nil {
					p.maps.release(maps[0])
				}
				return err
			}
			kept = maps
		}
		h := &holder{be: p.be}
		defer h.release()
		err := convStack(h, kept, x, ws, bs, ones, p.conv, false, false)
		p.be.phase("release")
		return err
	}
	useful := 2 * float64(pairs) * float64(p.C) * float64(p.C) * float64(p.L)
	return &workload{
		n: n, pairs: pairs, l: p.L,
		flops: map[string]float64{modeTrain: 3 * useful, modeInfer: useful, modeMap: 0, modeInferNoMap: useful},
		steps: map[string]func() error{modeTrain: step(true), modeInfer: step(false), modeMap: mapOnly, modeInferNoMap: noMap},
		close: func() {
			if kept != nil {
				p.maps.release(kept[0])
			}
			inputs.release()
		},
	}, nil
}

var down2 = grid.Cube(2, 2, 0, 1)

// downMaps builds the L strided maps, each over the previous one's output,
// preparing layer l's tables for use(l). On failure it returns the maps
// built so far (to be released) and the error.
func downMaps(src *mapSource, sc scene, L int, use func(l int) tableUse) ([]*kmap.Map, error) {
	maps := make([]*kmap.Map, 0, L)
	var prev *kmap.Map
	for l := range L {
		m, err := src.strided(prev, down2)
		if err != nil {
			e := sc.ext
			if prev != nil {
				e = prev.Out
			}
			return maps, fmt.Errorf("layer %d of %d (grid %v): %w", l, L, e, err)
		}
		maps = append(maps, m)
		if err := src.prepare(m, use(l)); err != nil {
			return maps, err
		}
		prev = m
	}
	return maps, nil
}

func downWorkload(sc scene, p params) (_ *workload, err error) {
	maps, err := downMaps(p.maps, sc, p.L, func(int) tableUse { return tableUse{} })
	var pairs int64
	for _, m := range maps {
		// Count before the release: a map built on a device is loaded from
		// its device tables.
		if err == nil {
			var n int64
			n, err = countPairs(m)
			pairs += n
		}
		p.maps.release(m)
	}
	if err != nil {
		return nil, err
	}
	nIn, nOut, V := maps[0].NIn, maps[p.L-1].NOut, maps[0].V()
	inputs := &holder{be: p.be}
	defer func() {
		if err != nil {
			inputs.release()
		}
	}()
	rng := rand.New(rand.NewPCG(p.seed, 2))
	x, err := inputs.random(p.dtype, nIn, p.C, normal(rng, 1))
	if err != nil {
		return nil, err
	}
	ws, bs, err := layerParams(inputs, p, V, rng)
	if err != nil {
		return nil, err
	}
	ones := func(h *holder) (sparse.Matrix, error) { return h.filled(p.dtype, nOut, p.C, 1) }
	step := func(train bool) func() error {
		build := func() ([]*kmap.Map, error) {
			return downMaps(p.maps, sc, p.L, func(l int) tableUse { return useFor(p, train, l > 0) })
		}
		return stepFunc(p, build, func(h *holder, maps []*kmap.Map) error {
			return convStack(h, maps, x, ws, bs, ones, p.conv, train, p.paramsFirst)
		})
	}
	useful := 2 * float64(pairs) * float64(p.C) * float64(p.C)
	return &workload{
		n: nIn, pairs: pairs, l: p.L,
		flops: map[string]float64{modeTrain: 3 * useful, modeInfer: useful},
		steps: map[string]func() error{modeTrain: step(true), modeInfer: step(false)},
		close: inputs.release,
	}, nil
}

// spherePoints returns FlexGEMM's grid-sample queries (tests/grid_sample.py
// sphere_query_pts): a res×res (θ, φ) grid, θ ∈ [0, 2π], φ ∈ [−π/2, π/2],
// on the sphere of radius res/2 − 0.5 around (res/2, res/2, res/2), for
// each of batch batches: [batch·res², 3] float32.
func spherePoints(res, batch int) []float32 {
	lin := func(a, b float64, i int) float64 {
		if res == 1 {
			return a
		}
		return a + (b-a)*float64(i)/float64(res-1)
	}
	c := float64(res) / 2
	r := c - 0.5
	pts := make([]float32, 0, 3*batch*res*res)
	for range batch {
		for i := range res {
			th := lin(0, 2*math.Pi, i)
			for j := range res {
				ph := lin(-math.Pi/2, math.Pi/2, j)
				pts = append(pts,
					float32(r*math.Cos(th)*math.Sin(ph)+c),
					float32(r*math.Sin(th)*math.Sin(ph)+c),
					float32(r*math.Cos(ph)+c))
			}
		}
	}
	return pts
}

func sampleWorkload(sc scene, p params) (*workload, error) {
	res := max(sc.ext.X, sc.ext.Y, sc.ext.Z)
	per := res * res
	pts := spherePoints(res, sc.ext.Batch)
	points := sparse.Matrix{Rows: len(pts) / 3, Cols: 3, Data: pts}
	plan, err := sparse.NewSamplePlan(sc.coords, sc.ext, points, per, sparse.Trilinear)
	if err != nil {
		return nil, err
	}
	var pairs int64
	for _, w := range plan.Weights() {
		if w != 0 {
			pairs++
		}
	}
	n := len(sc.coords) / 4
	rng := rand.New(rand.NewPCG(p.seed, 3))
	inputs := &holder{be: p.be}
	feats, err := inputs.random(p.dtype, n, p.C, normal(rng, 1))
	if err != nil {
		return nil, err
	}
	ones, err := inputs.filled(p.dtype, plan.Queries(), p.C, 1)
	if err != nil {
		return nil, err
	}
	step := func(train bool) func() error {
		return func() error {
			plan, err := sparse.NewSamplePlan(sc.coords, sc.ext, points, per, sparse.Trilinear)
			if err != nil {
				return err
			}
			if _, err := sparse.GridSample(plan, feats); err != nil {
				return err
			}
			if train {
				// Feature gradient only, like FlexGEMM (no point gradient).
				if _, _, err := sparse.GridSampleGrad(plan, sparse.Matrix{}, ones); err != nil {
					return err
				}
			}
			return nil
		}
	}
	useful := 2 * float64(pairs) * float64(p.C)
	return &workload{
		n: n, pairs: pairs, l: 1,
		flops: map[string]float64{modeTrain: 2 * useful, modeInfer: useful},
		steps: map[string]func() error{modeTrain: step(true), modeInfer: step(false)},
		close: inputs.release,
	}, nil
}
