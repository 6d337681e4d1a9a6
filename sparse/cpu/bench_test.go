package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// trainProblem is one submanifold 3×3×3 C→C layer on a sphere shell with
// float32 data for a training step: forward, input gradient and weight
// gradient.
type trainProblem struct {
	coords    []int32
	ext       grid.Extent
	m         *kmap.Map
	c         int
	x, w, b   []float32
	dy        []float32
	y, dx, dw []float32
}

func newTrainProblem(b *testing.B, res, c int) *trainProblem {
	coords, e := synth.SphereShell(res, 1)
	m, err := kmap.NewSubmanifold(coords, e, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	n := m.NIn
	return &trainProblem{
		coords: coords, ext: e, m: m, c: c,
		x: synth.Features[float32](rng, n, c), w: synth.Weights[float32](rng, c, 27, c),
		b: synth.Uniform[float32](rng, c), dy: synth.Features[float32](rng, n, c),
		y: make([]float32, n*c), dx: make([]float32, n*c), dw: make([]float32, c*27*c),
	}
}

// step runs forward, input gradient and weight gradient over map m.
func (p *trainProblem) step(b *testing.B, m *kmap.Map, opt Options) {
	c := p.c
	if err := Forward(m, p.x, c, p.w, c, p.b, p.y, opt); err != nil {
		b.Fatal(err)
	}
	if err := InputGrad(m, p.dy, c, p.w, c, p.dx, opt); err != nil {
		b.Fatal(err)
	}
	if err := WeightGrad(m, p.x, c, p.dy, c, p.dw, opt); err != nil {
		b.Fatal(err)
	}
}

// warm computes every derived structure of the map that the methods use.
func warm(m *kmap.Map) {
	m.Reverse()
	m.Pairs()
	m.Masked().Tiles(DefaultTileRows)
	m.ReverseMasked().Tiles(DefaultTileRows)
}

// reportGFLOPs reports useful GFLOP/s: flops per iteration over the time
// per iteration.
func reportGFLOPs(b *testing.B, flops float64) {
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// BenchmarkSubMConvTrain measures a training step (forward + input
// gradient + weight gradient) of a submanifold 3×3×3 C→C convolution on
// FlexGEMM's sphere shell, float32, for every method, with the kernel map
// prebuilt and with the map (and its derived tables) built inside the
// step. Useful FLOPs are 3·2·pairs·C·C per step (pairs = 191,208 at
// RES=64). For scale, "gonum-sgemm-skinny" runs gonum's dense Sgemm on the
// same FLOPs as three [pairs, C]·[C, C] products (the step's shape with
// every pair dense) and "gonum-sgemm-square" on one n×n·n×n product of the
// same FLOPs.
func BenchmarkSubMConvTrain(b *testing.B) {
	configs := []struct{ res, c int }{{64, 64}, {64, 32}, {64, 128}, {128, 64}}
	for _, cfg := range configs {
		p := newTrainProblem(b, cfg.res, cfg.c)
		pairs := float64(p.m.Pairs().Count())
		flops := 3 * 2 * pairs * float64(cfg.c*cfg.c)
		warm(p.m)
		for _, method := range append([]Method{Auto}, Methods...) {
			opt := Options{Method: method}
			b.Run(fmt.Sprintf("RES=%d/C=%d/%v/prebuilt", cfg.res, cfg.c, method), func(b *testing.B) {
				for b.Loop() {
					p.step(b, p.m, opt)
				}
				reportGFLOPs(b, flops)
			})
			b.Run(fmt.Sprintf("RES=%d/C=%d/%v/withmap", cfg.res, cfg.c, method), func(b *testing.B) {
				for b.Loop() {
					m, err := kmap.NewSubmanifold(p.coords, p.ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
					if err != nil {
						b.Fatal(err)
					}
					p.step(b, m, opt)
				}
				reportGFLOPs(b, flops)
			})
		}
		b.Run(fmt.Sprintf("RES=%d/C=%d/gonum-sgemm-skinny", cfg.res, cfg.c), func(b *testing.B) {
			rows, c := int(pairs), cfg.c
			rng := rand.New(rand.NewPCG(3, 4))
			a := synth.Uniform[float32](rng, rows*c)
			w := synth.Uniform[float32](rng, c*c)
			out := make([]float32, rows*c)
			var impl gonum.Implementation
			for b.Loop() {
				for range 3 {
					impl.Sgemm(blas.NoTrans, blas.NoTrans, rows, c, c, 1, a, c, w, c, 0, out, c)
				}
			}
			reportGFLOPs(b, flops)
		})
		b.Run(fmt.Sprintf("RES=%d/C=%d/gonum-sgemm-square", cfg.res, cfg.c), func(b *testing.B) {
			// A square n×n·n×n product with about the same FLOPs.
			n := int(math.Round(math.Cbrt(flops / 2)))
			rng := rand.New(rand.NewPCG(3, 4))
			a := synth.Uniform[float32](rng, n*n)
			w := synth.Uniform[float32](rng, n*n)
			out := make([]float32, n*n)
			var impl gonum.Implementation
			for b.Loop() {
				impl.Sgemm(blas.NoTrans, blas.NoTrans, n, n, n, 1, a, n, w, n, 0, out, n)
			}
			reportGFLOPs(b, 2*float64(n)*float64(n)*float64(n))
		})
	}
}

// BenchmarkSubMConv measures each direction separately on the RES=64
// shell with C=64, float32, map prebuilt (2·pairs·C·C useful FLOPs each).
func BenchmarkSubMConv(b *testing.B) {
	p := newTrainProblem(b, 64, 64)
	warm(p.m)
	c := p.c
	flops := 2 * float64(p.m.Pairs().Count()) * float64(c*c)
	for _, method := range append([]Method{Auto}, Methods...) {
		opt := Options{Method: method}
		b.Run(fmt.Sprintf("%v/fwd", method), func(b *testing.B) {
			for b.Loop() {
				if err := Forward(p.m, p.x, c, p.w, c, p.b, p.y, opt); err != nil {
					b.Fatal(err)
				}
			}
			reportGFLOPs(b, flops)
		})
		b.Run(fmt.Sprintf("%v/dgrad", method), func(b *testing.B) {
			for b.Loop() {
				if err := InputGrad(p.m, p.dy, c, p.w, c, p.dx, opt); err != nil {
					b.Fatal(err)
				}
			}
			reportGFLOPs(b, flops)
		})
		b.Run(fmt.Sprintf("%v/wgrad", method), func(b *testing.B) {
			for b.Loop() {
				if err := WeightGrad(p.m, p.x, c, p.dy, c, p.dw, opt); err != nil {
					b.Fatal(err)
				}
			}
			reportGFLOPs(b, flops)
		})
	}
}

// BenchmarkChannels measures one training step for narrow and unequal
// channel counts (first and last layers of a network) on the RES=64 shell,
// float32, map prebuilt, to choose Auto's method.
func BenchmarkChannels(b *testing.B) {
	coords, e := synth.SphereShell(64, 1)
	m, err := kmap.NewSubmanifold(coords, e, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	if err != nil {
		b.Fatal(err)
	}
	warm(m)
	pairs := float64(m.Pairs().Count())
	rng := rand.New(rand.NewPCG(5, 6))
	n := m.NIn
	for _, ch := range [][2]int{{1, 16}, {3, 32}, {4, 4}, {16, 16}, {32, 3}, {96, 96}} {
		ci, co := ch[0], ch[1]
		x := synth.Features[float32](rng, n, ci)
		w := synth.Weights[float32](rng, co, 27, ci)
		dy := synth.Features[float32](rng, n, co)
		y, dx, dw := make([]float32, n*co), make([]float32, n*ci), make([]float32, len(w))
		flops := 3 * 2 * pairs * float64(ci*co)
		for _, method := range Methods {
			opt := Options{Method: method}
			b.Run(fmt.Sprintf("%dto%d/%v", ci, co, method), func(b *testing.B) {
				for b.Loop() {
					if err := Forward(m, x, ci, w, co, nil, y, opt); err != nil {
						b.Fatal(err)
					}
					if err := InputGrad(m, dy, co, w, ci, dx, opt); err != nil {
						b.Fatal(err)
					}
					if err := WeightGrad(m, x, ci, dy, co, dw, opt); err != nil {
						b.Fatal(err)
					}
				}
				reportGFLOPs(b, flops)
			})
		}
	}
}

// BenchmarkSubMConvTrain64 is BenchmarkSubMConvTrain's RES=64, C=64 step
// in float64.
func BenchmarkSubMConvTrain64(b *testing.B) {
	coords, e := synth.SphereShell(64, 1)
	m, err := kmap.NewSubmanifold(coords, e, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	if err != nil {
		b.Fatal(err)
	}
	warm(m)
	const c = 64
	n := m.NIn
	rng := rand.New(rand.NewPCG(7, 8))
	x, w, dy := synth.Features[float64](rng, n, c), synth.Weights[float64](rng, c, 27, c), synth.Features[float64](rng, n, c)
	y, dx, dw := make([]float64, n*c), make([]float64, n*c), make([]float64, len(w))
	flops := 3 * 2 * float64(m.Pairs().Count()) * c * c
	for _, method := range append([]Method{Auto}, Methods...) {
		opt := Options{Method: method}
		b.Run(method.String(), func(b *testing.B) {
			for b.Loop() {
				if err := Forward(m, x, c, w, c, nil, y, opt); err != nil {
					b.Fatal(err)
				}
				if err := InputGrad(m, dy, c, w, c, dx, opt); err != nil {
					b.Fatal(err)
				}
				if err := WeightGrad(m, x, c, dy, c, dw, opt); err != nil {
					b.Fatal(err)
				}
			}
			reportGFLOPs(b, flops)
		})
	}
}
