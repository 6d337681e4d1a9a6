package main

import (
	"fmt"
	"math"
	"math/rand/v2"

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
	seed  uint64
}

// workload is a ready-to-time instance: one step function per mode.
type workload struct {
	n     int
	pairs int64
	l     int // L as reported
	flops map[string]float64
	steps map[string]func() error
}

// The GPU build replaces place (upload a host matrix to the device) and
// syncDevice (wait for queued work, called before reading a clock).
var (
	place      = func(m sparse.Matrix) (sparse.Matrix, error) { return m, nil }
	syncDevice = func() error { return nil }
)

// matrix returns a [rows, cols] matrix of dtype dt filled by f, placed on
// the benchmark's device.
func matrix(dt dtypeInfo, rows, cols int, f func() float64) (sparse.Matrix, error) {
	var m sparse.Matrix
	switch dt.host {
	case sparse.Float32:
		d := make([]float32, rows*cols)
		for i := range d {
			d[i] = float32(f())
		}
		m = sparse.Matrix{Rows: rows, Cols: cols, Data: d}
	case sparse.Float64:
		d := make([]float64, rows*cols)
		for i := range d {
			d[i] = f()
		}
		m = sparse.Matrix{Rows: rows, Cols: cols, Data: d}
	default:
		return sparse.Matrix{}, fmt.Errorf("dtype %s has no host storage", dt.name)
	}
	return place(m)
}

func normal(rng *rand.Rand, scale float64) func() float64 {
	return func() float64 { return rng.NormFloat64() * scale }
}

func constant(v float64) func() float64 { return func() float64 { return v } }

// layerParams returns L weights [C, V·C] scaled by 1/√(V·C) and L biases
// [1, C], like the anchor script.
func layerParams(p params, V int, rng *rand.Rand) (ws, bs []sparse.Matrix, err error) {
	for range p.L {
		w, err := matrix(p.dtype, p.C, V*p.C, normal(rng, 1/math.Sqrt(float64(V*p.C))))
		if err != nil {
			return nil, nil, err
		}
		b, err := matrix(p.dtype, 1, p.C, normal(rng, 1))
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
	switch p.op {
	case opSubm:
		return submWorkload(sc, p)
	case opDown:
		return downWorkload(sc, p)
	case opSample:
		return sampleWorkload(sc, p)
	}
	return nil, fmt.Errorf("unknown op %q (want one of %v)", p.op, allOps)
}

// convStack runs L convolutions over maps (one per layer) forward and, if
// train, backward with an all-ones gradient; layer 0 gets no input
// gradient.
func convStack(maps []*kmap.Map, x sparse.Matrix, ws, bs []sparse.Matrix, ones sparse.Matrix, opt sparse.ConvOptions, train bool) error {
	L := len(ws)
	acts := make([]sparse.Matrix, L)
	h := x
	var err error
	for l := range L {
		acts[l] = h
		if h, err = sparse.Conv(maps[l], h, ws[l], bs[l], opt); err != nil {
			return fmt.Errorf("layer %d forward: %w", l, err)
		}
	}
	if !train {
		return nil
	}
	dy := ones
	for l := L - 1; l >= 0; l-- {
		if _, err := sparse.ConvWeightGrad(maps[l], acts[l], dy, opt); err != nil {
			return fmt.Errorf("layer %d weight gradient: %w", l, err)
		}
		if _, err := sparse.BiasGrad(dy); err != nil {
			return fmt.Errorf("layer %d bias gradient: %w", l, err)
		}
		if l > 0 {
			if dy, err = sparse.ConvInputGrad(maps[l], dy, ws[l], opt); err != nil {
				return fmt.Errorf("layer %d input gradient: %w", l, err)
			}
		}
	}
	return nil
}

var (
	kernel3   = [3]int{3, 3, 3}
	dilation1 = [3]int{1, 1, 1}
)

func submWorkload(sc scene, p params) (*workload, error) {
	m, err := kmap.NewSubmanifold(sc.coords, sc.ext, kernel3, dilation1)
	if err != nil {
		return nil, err
	}
	n := m.NIn
	pairs := m.Pairs().Count()
	rng := rand.New(rand.NewPCG(p.seed, 1))
	x, err := matrix(p.dtype, n, p.C, normal(rng, 1))
	if err != nil {
		return nil, err
	}
	ws, bs, err := layerParams(p, m.V(), rng)
	if err != nil {
		return nil, err
	}
	ones, err := matrix(p.dtype, n, p.C, constant(1))
	if err != nil {
		return nil, err
	}
	step := func(train bool) func() error {
		return func() error {
			m, err := kmap.NewSubmanifold(sc.coords, sc.ext, kernel3, dilation1)
			if err != nil {
				return err
			}
			maps := make([]*kmap.Map, p.L)
			for l := range maps {
				maps[l] = m
			}
			return convStack(maps, x, ws, bs, ones, p.conv, train)
		}
	}
	useful := 2 * float64(pairs) * float64(p.C) * float64(p.C) * float64(p.L)
	return &workload{
		n: n, pairs: pairs, l: p.L,
		flops: map[string]float64{"train": 3 * useful, "infer": useful},
		steps: map[string]func() error{"train": step(true), "infer": step(false)},
	}, nil
}

var down2 = grid.Cube(2, 2, 0, 1)

// downMaps builds the L strided maps, each over the previous one's output.
func downMaps(sc scene, L int) ([]*kmap.Map, error) {
	maps := make([]*kmap.Map, L)
	c, e := sc.coords, sc.ext
	for l := range maps {
		m, err := kmap.NewStrided(c, e, down2, nil)
		if err != nil {
			return nil, fmt.Errorf("layer %d of %d (grid %v): %w", l, L, e, err)
		}
		maps[l] = m
		c, e = m.OutCoords, m.Out
	}
	return maps, nil
}

func downWorkload(sc scene, p params) (*workload, error) {
	maps, err := downMaps(sc, p.L)
	if err != nil {
		return nil, err
	}
	var pairs int64
	for _, m := range maps {
		pairs += m.Pairs().Count()
	}
	rng := rand.New(rand.NewPCG(p.seed, 2))
	x, err := matrix(p.dtype, maps[0].NIn, p.C, normal(rng, 1))
	if err != nil {
		return nil, err
	}
	ws, bs, err := layerParams(p, maps[0].V(), rng)
	if err != nil {
		return nil, err
	}
	ones, err := matrix(p.dtype, maps[p.L-1].NOut, p.C, constant(1))
	if err != nil {
		return nil, err
	}
	step := func(train bool) func() error {
		return func() error {
			maps, err := downMaps(sc, p.L)
			if err != nil {
				return err
			}
			return convStack(maps, x, ws, bs, ones, p.conv, train)
		}
	}
	useful := 2 * float64(pairs) * float64(p.C) * float64(p.C)
	return &workload{
		n: maps[0].NIn, pairs: pairs, l: p.L,
		flops: map[string]float64{"train": 3 * useful, "infer": useful},
		steps: map[string]func() error{"train": step(true), "infer": step(false)},
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
	points, err := place(sparse.Matrix{Rows: len(pts) / 3, Cols: 3, Data: pts})
	if err != nil {
		return nil, err
	}
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
	feats, err := matrix(p.dtype, n, p.C, normal(rng, 1))
	if err != nil {
		return nil, err
	}
	ones, err := matrix(p.dtype, plan.Queries(), p.C, constant(1))
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
		flops: map[string]float64{"train": 2 * useful, "infer": useful},
		steps: map[string]func() error{"train": step(true), "infer": step(false)},
	}, nil
}
