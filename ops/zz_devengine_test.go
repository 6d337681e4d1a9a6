package ops_test

// TEMPORARY development engine: used only while no CPU engine is
// registered for host data. Delete once sparse registers its CPU engine.

import (
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

type devEngine struct{}

func init() {
	if _, err := sparse.EngineFor(sparse.Matrix{Rows: 1, Cols: 1, Data: []float64{0}}); err != nil {
		sparse.Register(devEngine{})
	}
}

func (devEngine) Name() string { return "dev" }
func (devEngine) Owns(m sparse.Matrix) bool {
	switch m.Data.(type) {
	case []float32, []float64:
		return true
	}
	return false
}
func devConv[T float32 | float64](m *kmap.Map, x, w, b []T, ci, co int) []T {
	V := m.V()
	y := make([]T, m.NOut*co)
	for o := 0; o < m.NOut; o++ {
		for c := 0; c < co; c++ {
			var s float64
			if b != nil {
				s = float64(b[c])
			}
			for v := 0; v < V; v++ {
				i := m.Nbr[o*V+v]
				if i < 0 {
					continue
				}
				for k := 0; k < ci; k++ {
					s += float64(w[c*V*ci+v*ci+k]) * float64(x[int(i)*ci+k])
				}
			}
			y[o*co+c] = T(s)
		}
	}
	return y
}
func devIG[T float32 | float64](m *kmap.Map, dy, w []T, ci, co int) []T {
	V := m.V()
	dx := make([]T, m.NIn*ci)
	for o := 0; o < m.NOut; o++ {
		for v := 0; v < V; v++ {
			i := m.Nbr[o*V+v]
			if i < 0 {
				continue
			}
			for k := 0; k < ci; k++ {
				for c := 0; c < co; c++ {
					dx[int(i)*ci+k] += w[c*V*ci+v*ci+k] * dy[o*co+c]
				}
			}
		}
	}
	return dx
}
func devWG[T float32 | float64](m *kmap.Map, x, dy []T, ci, co int) []T {
	V := m.V()
	dw := make([]T, co*V*ci)
	for o := 0; o < m.NOut; o++ {
		for v := 0; v < V; v++ {
			i := m.Nbr[o*V+v]
			if i < 0 {
				continue
			}
			for k := 0; k < ci; k++ {
				for c := 0; c < co; c++ {
					dw[c*V*ci+v*ci+k] += x[int(i)*ci+k] * dy[o*co+c]
				}
			}
		}
	}
	return dw
}
func (devEngine) ConvForward(m *kmap.Map, x, w, bias sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	if x.F64() != nil {
		return sparse.Matrix{Rows: m.NOut, Cols: w.Rows, Data: devConv(m, x.F64(), w.F64(), bias.F64(), x.Cols, w.Rows)}, nil
	}
	return sparse.Matrix{Rows: m.NOut, Cols: w.Rows, Data: devConv(m, x.F32(), w.F32(), bias.F32(), x.Cols, w.Rows)}, nil
}
func (devEngine) ConvInputGrad(m *kmap.Map, dy, w sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	ci := w.Cols / m.V()
	if dy.F64() != nil {
		return sparse.Matrix{Rows: m.NIn, Cols: ci, Data: devIG(m, dy.F64(), w.F64(), ci, dy.Cols)}, nil
	}
	return sparse.Matrix{Rows: m.NIn, Cols: ci, Data: devIG(m, dy.F32(), w.F32(), ci, dy.Cols)}, nil
}
func (devEngine) ConvWeightGrad(m *kmap.Map, x, dy sparse.Matrix, opt sparse.ConvOptions) (sparse.Matrix, error) {
	if x.F64() != nil {
		return sparse.Matrix{Rows: dy.Cols, Cols: m.V() * x.Cols, Data: devWG(m, x.F64(), dy.F64(), x.Cols, dy.Cols)}, nil
	}
	return sparse.Matrix{Rows: dy.Cols, Cols: m.V() * x.Cols, Data: devWG(m, x.F32(), dy.F32(), x.Cols, dy.Cols)}, nil
}
func (devEngine) BiasGrad(dy sparse.Matrix) (sparse.Matrix, error) {
	if d := dy.F64(); d != nil {
		out := make([]float64, dy.Cols)
		for r := 0; r < dy.Rows; r++ {
			for c := 0; c < dy.Cols; c++ {
				out[c] += d[r*dy.Cols+c]
			}
		}
		return sparse.Matrix{Rows: 1, Cols: dy.Cols, Data: out}, nil
	}
	d := dy.F32()
	out := make([]float32, dy.Cols)
	for r := 0; r < dy.Rows; r++ {
		for c := 0; c < dy.Cols; c++ {
			out[c] += d[r*dy.Cols+c]
		}
	}
	return sparse.Matrix{Rows: 1, Cols: dy.Cols, Data: out}, nil
}
