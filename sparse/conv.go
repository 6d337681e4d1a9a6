package sparse

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// Conv computes the sparse convolution y = conv(x) over kernel map m:
//
//	y[o, :] = bias + Σ_v w[:, v, :] · x[m.Nbr[o, v], :]     (absent neighbours skipped)
//
// Shapes: x [m.NIn, Ci]; w [Co, V·Ci], the weight [Co, Kx, Ky, Kz, Ci]
// flattened; bias [1, Co] or the zero Matrix; result [m.NOut, Co]. x, w and
// bias must share one dtype and one engine.
func Conv(m *kmap.Map, x, w, bias Matrix, opt ConvOptions) (Matrix, error) {
	e, err := checkConv("Conv", m, x, w, opt)
	if err != nil {
		return Matrix{}, err
	}
	if !bias.IsZero() {
		if err := sameDType("Conv", "bias", x, bias); err != nil {
			return Matrix{}, err
		}
		if bias.Rows != 1 || bias.Cols != w.Rows {
			return Matrix{}, &ShapeError{Op: "Conv", Arg: "bias", Want: fmt.Sprintf("[1, %d]", w.Rows), Got: bias.Shape()}
		}
		if e, err = EngineFor(x, w, bias); err != nil {
			return Matrix{}, err
		}
	}
	return e.ConvForward(m, x, w, bias, opt)
}

// ConvInputGrad returns the gradient of Conv with respect to x:
//
//	dx[i, :] = Σ_v w[:, v, :]ᵀ · dy[m.Rev[i, v], :]
//
// Shapes: dy [m.NOut, Co]; w [Co, V·Ci]; result [m.NIn, Ci].
func ConvInputGrad(m *kmap.Map, dy, w Matrix, opt ConvOptions) (Matrix, error) {
	if err := checkMap("ConvInputGrad", m); err != nil {
		return Matrix{}, err
	}
	if err := checkMatrix("ConvInputGrad", "dy", dy, m.NOut, -1); err != nil {
		return Matrix{}, err
	}
	if err := checkMatrix("ConvInputGrad", "weight", w, dy.Cols, -1); err != nil {
		return Matrix{}, err
	}
	if w.Cols%m.V() != 0 {
		return Matrix{}, &ShapeError{Op: "ConvInputGrad", Arg: "weight", Want: fmt.Sprintf("[%d, %d·Ci]", dy.Cols, m.V()), Got: w.Shape()}
	}
	if err := sameDType("ConvInputGrad", "weight", dy, w); err != nil {
		return Matrix{}, err
	}
	if err := opt.validate(); err != nil {
		return Matrix{}, err
	}
	e, err := EngineFor(dy, w)
	if err != nil {
		return Matrix{}, err
	}
	return e.ConvInputGrad(m, dy, w, opt)
}

// ConvWeightGrad returns the gradient of Conv with respect to w:
//
//	dw[:, v, :] = Σ_{o : i = m.Nbr[o, v] ≥ 0} dy[o, :] ⊗ x[i, :]
//
// Shapes: x [m.NIn, Ci]; dy [m.NOut, Co]; result [Co, V·Ci]. The result
// has the inputs' dtype, except that float16/bfloat16 device inputs give a
// float32 result (unless opt.NarrowWeightGrad is set).
func ConvWeightGrad(m *kmap.Map, x, dy Matrix, opt ConvOptions) (Matrix, error) {
	e, err := checkWeightGrad("ConvWeightGrad", m, x, dy, opt)
	if err != nil {
		return Matrix{}, err
	}
	return e.ConvWeightGrad(m, x, dy, opt)
}

// checkWeightGrad validates the arguments of ConvWeightGrad (and
// ConvParamGrads) and returns the engine that owns x and dy.
func checkWeightGrad(op string, m *kmap.Map, x, dy Matrix, opt ConvOptions) (Engine, error) {
	if err := checkMap(op, m); err != nil {
		return nil, err
	}
	if err := checkMatrix(op, "x", x, m.NIn, -1); err != nil {
		return nil, err
	}
	if err := checkMatrix(op, "dy", dy, m.NOut, -1); err != nil {
		return nil, err
	}
	if err := sameDType(op, "dy", x, dy); err != nil {
		return nil, err
	}
	if err := opt.validate(); err != nil {
		return nil, err
	}
	return EngineFor(x, dy)
}

// ConvParamGrads returns the gradients of Conv with respect to its weight
// and its bias, ConvWeightGrad(m, x, dy, opt) and BiasGrad(dy), together:
// an engine that implements ParamGradEngine computes both in one pass (the
// CUDA engine sums the bias gradient of a submanifold map in the weight
// gradient's centre tap, whose pairs cover every row of dy once), any
// other runs the two in turn. The results have the same dtypes and shapes
// as those of the two calls and agree with them to rounding.
func ConvParamGrads(m *kmap.Map, x, dy Matrix, opt ConvOptions) (dw, db Matrix, err error) {
	e, err := checkWeightGrad("ConvParamGrads", m, x, dy, opt)
	if err != nil {
		return Matrix{}, Matrix{}, err
	}
	if pe, ok := e.(ParamGradEngine); ok {
		return pe.ConvParamGrads(m, x, dy, opt)
	}
	if dw, err = e.ConvWeightGrad(m, x, dy, opt); err != nil {
		return Matrix{}, Matrix{}, err
	}
	if db, err = e.BiasGrad(dy); err != nil {
		if f, ok := e.(MatrixFreer); ok {
			f.Free(dw)
		}
		return Matrix{}, Matrix{}, err
	}
	return dw, db, nil
}

// BiasGrad returns the gradient of Conv with respect to bias: the column
// sums of dy, as a [1, Co] matrix of dy's dtype (float32 for float16 and
// bfloat16 device data).
func BiasGrad(dy Matrix) (Matrix, error) {
	if err := dy.Validate(); err != nil {
		return Matrix{}, fmt.Errorf("sparse: BiasGrad: %w", err)
	}
	e, err := EngineFor(dy)
	if err != nil {
		return Matrix{}, err
	}
	return e.BiasGrad(dy)
}

func checkConv(op string, m *kmap.Map, x, w Matrix, opt ConvOptions) (Engine, error) {
	if err := checkMap(op, m); err != nil {
		return nil, err
	}
	if err := checkMatrix(op, "x", x, m.NIn, -1); err != nil {
		return nil, err
	}
	if err := checkMatrix(op, "weight", w, -1, m.V()*x.Cols); err != nil {
		return nil, err
	}
	if err := sameDType(op, "weight", x, w); err != nil {
		return nil, err
	}
	if err := opt.validate(); err != nil {
		return nil, err
	}
	return EngineFor(x, w)
}

func checkMap(op string, m *kmap.Map) error {
	if m == nil {
		return fmt.Errorf("%w: %s: nil kernel map", ErrShape, op)
	}
	// A map whose tables are still held by its Source (an engine's device)
	// is checked by whoever loads it, so validation downloads nothing.
	if m.Loaded() && len(m.Nbr) != m.NOut*m.V() {
		return fmt.Errorf("%w: %s: kernel map table has %d entries, want %d·%d", ErrShape, op, len(m.Nbr), m.NOut, m.V())
	}
	return nil
}

// checkMatrix validates m and its shape; a negative rows or cols is not
// checked.
func checkMatrix(op, arg string, m Matrix, rows, cols int) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("sparse: %s: %s: %w", op, arg, err)
	}
	if (rows >= 0 && m.Rows != rows) || (cols >= 0 && m.Cols != cols) {
		want := fmt.Sprintf("[%s, %s]", dim(rows, "rows"), dim(cols, "cols"))
		return &ShapeError{Op: op, Arg: arg, Want: want, Got: m.Shape()}
	}
	return nil
}

func dim(n int, name string) string {
	if n < 0 {
		return name
	}
	return fmt.Sprint(n)
}

func sameDType(op, arg string, a, b Matrix) error {
	da, err := a.DType()
	if err != nil {
		return err
	}
	db, err := b.DType()
	if err != nil {
		return err
	}
	if da != db {
		return fmt.Errorf("%w: %s: %s is %v but the input is %v", ErrDType, op, arg, db, da)
	}
	if da == Int32 {
		return fmt.Errorf("%w: %s: int32 features", ErrDType, op)
	}
	return nil
}

// validate checks the algorithm and that SplitK and TileRows are not
// negative (0 means the engine's default).
func (opt ConvOptions) validate() error {
	if err := opt.Algorithm.Valid(); err != nil {
		return err
	}
	if opt.SplitK < 0 {
		return fmt.Errorf("%w: SplitK %d is negative", ErrOptions, opt.SplitK)
	}
	if opt.TileRows < 0 {
		return fmt.Errorf("%w: TileRows %d is negative", ErrOptions, opt.TileRows)
	}
	return nil
}
