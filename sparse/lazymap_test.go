package sparse_test

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// heldTables stands for an engine holding a map's tables on its device: it
// counts the downloads and can fail.
type heldTables struct {
	ref   *kmap.Map
	calls atomic.Int32
	fail  error
}

func (h *heldTables) HostTables(*kmap.Map) (kmap.Tables, error) {
	h.calls.Add(1)
	if h.fail != nil {
		return kmap.Tables{}, h.fail
	}
	return kmap.Tables{InCoords: slices.Clone(h.ref.InCoords), OutCoords: slices.Clone(h.ref.OutCoords), Nbr: slices.Clone(h.ref.Nbr)}, nil
}

func heldCopy(ref *kmap.Map) (*kmap.Map, *heldTables) {
	h := &heldTables{ref: ref}
	return &kmap.Map{Kind: ref.Kind, Conv: ref.Conv, In: ref.In, Out: ref.Out, NIn: ref.NIn, NOut: ref.NOut, Source: h}, h
}

// TestConvLoadsHeldMap: the package API accepts a map whose tables are held
// elsewhere without loading it, and the CPU engine loads it once on first
// use; every direction and pooling give the eager map's results.
func TestConvLoadsHeldMap(t *testing.T) {
	p := newConvProblem(t, 3)
	m, h := heldCopy(p.m)
	x := matrixOf[float64](t, p.m.NIn, p.ci, p.x)
	w := matrixOf[float64](t, p.co, p.m.V()*p.ci, p.w)
	b := matrixOf[float64](t, 1, p.co, p.b)
	dy := matrixOf[float64](t, p.m.NOut, p.co, p.dy)
	opt := sparse.ConvOptions{Algorithm: sparse.MaskedImplicitSplitK}

	// Validation of the package API must not download: a wrong weight is
	// reported without asking the source.
	_, err := sparse.Conv(m, x, matrixOf[float64](t, p.co, p.ci, p.w[:p.co*p.ci]), b, opt)
	require.ErrorIs(t, err, sparse.ErrShape)
	require.Zero(t, h.calls.Load())

	y, err := sparse.Conv(m, x, w, b, opt)
	require.NoError(t, err)
	wantY, err := sparse.Conv(p.m, x, w, b, opt)
	require.NoError(t, err)
	require.Equal(t, wantY, y)
	dx, err := sparse.ConvInputGrad(m, dy, w, opt)
	require.NoError(t, err)
	wantDX, err := sparse.ConvInputGrad(p.m, dy, w, opt)
	require.NoError(t, err)
	require.Equal(t, wantDX, dx)
	dw, err := sparse.ConvWeightGrad(m, x, dy, opt)
	require.NoError(t, err)
	wantDW, err := sparse.ConvWeightGrad(p.m, x, dy, opt)
	require.NoError(t, err)
	require.Equal(t, wantDW, dw)
	require.Equal(t, int32(1), h.calls.Load())

	for _, mode := range []sparse.PoolMode{sparse.MaxPool, sparse.AvgPool} {
		pm, ph := heldCopy(p.m)
		py, arg, err := sparse.Pool(pm, x, mode)
		require.NoError(t, err)
		wy, warg, err := sparse.Pool(p.m, x, mode)
		require.NoError(t, err)
		require.Equal(t, wy, py)
		require.Equal(t, warg, arg)
		pg, ph2 := heldCopy(p.m)
		dyp := matrixOf[float64](t, p.m.NOut, p.ci, p.x[:p.m.NOut*p.ci])
		g, err := sparse.PoolGrad(pg, dyp, arg, mode)
		require.NoError(t, err)
		wg, err := sparse.PoolGrad(p.m, dyp, warg, mode)
		require.NoError(t, err)
		require.Equal(t, wg, g)
		require.Equal(t, int32(1), ph.calls.Load())
		require.Equal(t, int32(1), ph2.calls.Load())
	}
}

// TestConvHeldMapFailure: a source that cannot deliver gives an error
// wrapping its own, never a panic.
func TestConvHeldMapFailure(t *testing.T) {
	p := newConvProblem(t, 4)
	gone := errors.New("device closed")
	m, h := heldCopy(p.m)
	h.fail = gone
	x := matrixOf[float32](t, p.m.NIn, p.ci, p.x)
	w := matrixOf[float32](t, p.co, p.m.V()*p.ci, p.w)
	dy := matrixOf[float32](t, p.m.NOut, p.co, p.dy)
	_, err := sparse.Conv(m, x, w, sparse.Matrix{}, sparse.ConvOptions{})
	require.ErrorIs(t, err, gone)
	_, err = sparse.ConvInputGrad(m, dy, w, sparse.ConvOptions{})
	require.ErrorIs(t, err, gone)
	_, err = sparse.ConvWeightGrad(m, x, dy, sparse.ConvOptions{})
	require.ErrorIs(t, err, gone)
	_, _, err = sparse.Pool(m, x, sparse.AvgPool)
	require.ErrorIs(t, err, gone)
	_, err = sparse.PoolGrad(m, matrixOf[float32](t, p.m.NOut, p.ci, p.x[:p.m.NOut*p.ci]), sparse.Matrix{}, sparse.AvgPool)
	require.ErrorIs(t, err, gone)
	require.Equal(t, int32(5), h.calls.Load())
	require.False(t, m.Loaded())
}
