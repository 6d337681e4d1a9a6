package sparse_test

import (
	"fmt"
	"testing"

	"github.com/flexgemm-go/flexgemm/internal/maptest"
	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// int32Storage is device coordinate data that no registered engine owns.
type int32Storage struct{ n int }

func (int32Storage) DType() sparse.DType { return sparse.Int32 }
func (s int32Storage) Len() int          { return s.n }

func TestMapsOfHostCoordinates(t *testing.T) {
	coords, ext := synth.SphereShell(12, 2)
	cm, err := sparse.MatrixOf(len(coords)/4, 4, coords)
	require.NoError(t, err)

	got, err := sparse.SubmanifoldMapOf(cm, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	want, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	require.Equal(t, want.Nbr, got.Nbr)

	conv := grid.Cube(2, 2, 0, 1)
	gs, err := sparse.StridedMapOf(cm, ext, conv, sparse.Matrix{})
	require.NoError(t, err)
	ws, err := kmap.NewStrided(coords, ext, conv, nil)
	require.NoError(t, err)
	require.Equal(t, ws.OutCoords, gs.OutCoords)
	require.Equal(t, ws.Nbr, gs.Nbr)

	// Given output coordinates: the generated ones, reversed.
	n := len(ws.OutCoords) / 4
	rev := make([]int32, 0, len(ws.OutCoords))
	for r := n - 1; r >= 0; r-- {
		rev = append(rev, ws.OutCoords[4*r:4*r+4]...)
	}
	om, err := sparse.MatrixOf(n, 4, rev)
	require.NoError(t, err)
	gg, err := sparse.StridedMapOf(cm, ext, conv, om)
	require.NoError(t, err)
	require.Equal(t, rev, gg.OutCoords)

	gt, err := sparse.TransposedMapOf(cm, ext, conv)
	require.NoError(t, err)
	wt, err := kmap.NewTransposed(coords, ext, conv)
	require.NoError(t, err)
	require.Equal(t, wt.Nbr, gt.Nbr)

	empty := sparse.NewMatrix[int32](0, 4)
	m0, err := sparse.SubmanifoldMapOf(empty, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	require.Zero(t, m0.NOut)
}

func TestMapsOfErrors(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	k, d := [3]int{3, 3, 3}, [3]int{1, 1, 1}
	f32 := sparse.NewMatrix[float32](2, 4)
	_, err := sparse.SubmanifoldMapOf(f32, ext, k, d)
	require.ErrorIs(t, err, sparse.ErrDType)

	three := sparse.NewMatrix[int32](2, 3)
	_, err = sparse.SubmanifoldMapOf(three, ext, k, d)
	require.ErrorIs(t, err, sparse.ErrShape)

	dev := sparse.Matrix{Rows: 2, Cols: 4, Data: int32Storage{8}}
	_, err = sparse.SubmanifoldMapOf(dev, ext, k, d)
	require.ErrorIs(t, err, sparse.ErrNoEngine)
	_, err = sparse.TransposedMapOf(dev, ext, grid.Cube(2, 2, 0, 1))
	require.ErrorIs(t, err, sparse.ErrNoEngine)

	host, err := sparse.MatrixOf(1, 4, []int32{0, 1, 1, 1})
	require.NoError(t, err)
	_, err = sparse.StridedMapOf(host, ext, grid.Cube(2, 2, 0, 1), dev)
	require.ErrorIs(t, err, sparse.ErrNoEngine)

	out, err := sparse.MatrixOf(1, 4, []int32{0, 9, 0, 0}) // outside the 2³ output grid
	require.NoError(t, err)
	_, err = sparse.StridedMapOf(host, ext, grid.Cube(2, 2, 0, 1), out)
	require.Error(t, err)

	even := [3]int{2, 3, 3}
	_, err = sparse.SubmanifoldMapOf(host, ext, even, d)
	require.ErrorIs(t, err, grid.ErrBadGeometry)
}

// hostSource is a kmap.TableSource holding a map's tables on the host, as
// an engine's device would, and naming a MapEngine (mapEngine nil: a plain
// TableSource, no MapSource).
type hostSource struct {
	t      kmap.Tables
	engine sparse.MapEngine
	loads  int
}

func (s *hostSource) HostTables(*kmap.Map) (kmap.Tables, error) {
	s.loads++
	return s.t, nil
}

type engineSource struct{ *hostSource }

func (s engineSource) MapEngine() sparse.MapEngine { return s.engine }

// invEngine is a MapEngine that records the maps it inverts.
type invEngine struct {
	got []*kmap.Map
	ret *kmap.Map
	err error
}

func (*invEngine) SubmanifoldMap(sparse.Matrix, sparse.Extent, [3]int, [3]int) (*kmap.Map, error) {
	return nil, sparse.ErrNoEngine
}

func (*invEngine) StridedMap(sparse.Matrix, sparse.Extent, grid.Conv, sparse.Matrix) (*kmap.Map, error) {
	return nil, sparse.ErrNoEngine
}

func (*invEngine) TransposedMap(sparse.Matrix, sparse.Extent, grid.Conv) (*kmap.Map, error) {
	return nil, sparse.ErrNoEngine
}

func (e *invEngine) InverseMap(m *kmap.Map) (*kmap.Map, error) {
	e.got = append(e.got, m)
	return e.ret, e.err
}

// sourced returns a copy of the header of s whose tables are held by src.
func sourced(s *kmap.Map, src kmap.TableSource) *kmap.Map {
	return &kmap.Map{Kind: s.Kind, Conv: s.Conv, In: s.In, Out: s.Out, NIn: s.NIn, NOut: s.NOut, Source: src}
}

func TestInverseMapOf(t *testing.T) {
	coords, ext := synth.SphereShell(10, 3)
	empty := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	cases := []struct {
		name   string
		coords []int32
		ext    grid.Extent
		conv   grid.Conv
	}{
		{"shell-batch3-k2s2", coords, ext, grid.Cube(2, 2, 0, 1)},
		{"shell-batch3-k3s2p1", coords, ext, grid.Cube(3, 2, 1, 1)},
		{"one-voxel", []int32{0, 3, 1, 2}, empty, grid.Cube(3, 2, 1, 1)},
		{"empty", nil, empty, grid.Cube(2, 2, 0, 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st, err := kmap.NewStrided(c.coords, c.ext, c.conv, nil)
			require.NoError(t, err)
			want, err := kmap.NewInverse(st)
			require.NoError(t, err)

			// A host map: kmap.NewInverse.
			got, err := sparse.InverseMapOf(st)
			require.NoError(t, err)
			maptest.RequireSameMap(t, want, got)
			require.Nil(t, got.Source)

			// A map whose tables a plain TableSource holds: loaded, then
			// kmap.NewInverse.
			hs := &hostSource{t: kmap.Tables{InCoords: st.InCoords, OutCoords: st.OutCoords, Nbr: st.Nbr}}
			lazy := sourced(st, hs)
			got, err = sparse.InverseMapOf(lazy)
			require.NoError(t, err)
			require.True(t, lazy.Loaded())
			require.LessOrEqual(t, hs.loads, 1)
			maptest.RequireSameMap(t, want, got)

			// A map built by a MapEngine: that engine inverts it, nothing
			// is loaded here.
			eng := &invEngine{ret: want}
			es := &hostSource{t: hs.t, engine: eng}
			dev := sourced(st, engineSource{es})
			got, err = sparse.InverseMapOf(dev)
			require.NoError(t, err)
			require.Same(t, want, got)
			require.Equal(t, []*kmap.Map{dev}, eng.got)
			require.Zero(t, es.loads, "the engine's map is not loaded to the host")

			// The engine's errors keep their sentinels and gain sparse's.
			eng.ret, eng.err = nil, fmt.Errorf("engine: %w", kmap.ErrTooLarge)
			_, err = sparse.InverseMapOf(dev)
			require.ErrorIs(t, err, kmap.ErrTooLarge)
			require.ErrorIs(t, err, sparse.ErrIndexOverflow)
			require.ErrorContains(t, err, "InverseMapOf")

			// A MapSource naming no engine falls back to the host.
			ns := &hostSource{t: hs.t}
			got, err = sparse.InverseMapOf(sourced(st, engineSource{ns}))
			require.NoError(t, err)
			maptest.RequireSameMap(t, want, got)
		})
	}
}

func TestInverseMapOfErrors(t *testing.T) {
	coords, ext := synth.SphereShell(8, 1)
	sub, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	eng := &invEngine{}
	for _, c := range []struct {
		name string
		m    *kmap.Map
		msg  string
	}{
		{"nil", nil, "nil map"},
		{"submanifold", sub, "needs a strided map, got a submanifold map"},
		// The kind is checked before the engine is asked.
		{"engine submanifold", sourced(sub, engineSource{&hostSource{engine: eng}}), "needs a strided map"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := sparse.InverseMapOf(c.m)
			require.ErrorIs(t, err, kmap.ErrMap)
			require.ErrorIs(t, err, sparse.ErrShape)
			require.ErrorContains(t, err, c.msg)
			require.ErrorContains(t, err, "InverseMapOf")
		})
	}
	require.Empty(t, eng.got)
	// A broken host map is rejected by kmap.NewInverse's validation.
	st, err := kmap.NewStrided(coords, ext, grid.Cube(2, 2, 0, 1), nil)
	require.NoError(t, err)
	bad := &kmap.Map{Kind: st.Kind, Conv: st.Conv, In: st.In, Out: st.Out, NIn: st.NIn, NOut: st.NOut,
		InCoords: st.InCoords, OutCoords: st.OutCoords, Nbr: st.Nbr[:len(st.Nbr)-1]}
	_, err = sparse.InverseMapOf(bad)
	require.ErrorIs(t, err, kmap.ErrMap)
}

func ExampleInverseMapOf() {
	coords, _ := sparse.MatrixOf(3, 4, []int32{0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 2, 2})
	ext := sparse.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	down, err := sparse.StridedMapOf(coords, ext, grid.Cube(2, 2, 0, 1), sparse.Matrix{})
	if err != nil {
		panic(err)
	}
	up, err := sparse.InverseMapOf(down)
	if err != nil {
		panic(err)
	}
	fmt.Println(down.NIn, down.NOut, up.NIn, up.NOut, up.Kind)
	// Output: 3 2 2 3 inverse
}

func ExampleSubmanifoldMapOf() {
	coords, _ := sparse.MatrixOf(3, 4, []int32{0, 1, 1, 1, 0, 1, 1, 2, 0, 2, 1, 1})
	m, err := sparse.SubmanifoldMapOf(coords, sparse.Extent{Batch: 1, X: 4, Y: 4, Z: 4}, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	if err != nil {
		panic(err)
	}
	fmt.Println(m.NOut, m.V(), m.Pairs().Count())
	// Output: 3 27 9
}
