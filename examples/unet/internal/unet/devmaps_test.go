package unet

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// TestLevelsMatchStridedOutputs checks the host-side level coordinates
// against kmap.NewStrided's generated outputs on random scenes (odd and
// even grids, several batches, empty and single voxels).
func TestLevelsMatchStridedOutputs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		n, g, b, levels int
	}{{0, 8, 1, 3}, {1, 8, 1, 3}, {50, 7, 2, 2}, {400, 16, 3, 4}, {2000, 33, 2, 4}} {
		ext := grid.Extent{Batch: tc.b, X: tc.g, Y: tc.g + 1, Z: tc.g + 2}
		seen := map[[4]int32]bool{}
		var coords []int32
		for len(coords) < 4*tc.n {
			c := [4]int32{int32(rng.IntN(tc.b)), int32(rng.IntN(ext.X)), int32(rng.IntN(ext.Y)), int32(rng.IntN(ext.Z))}
			if !seen[c] {
				seen[c] = true
				coords = append(coords, c[:]...)
			}
		}
		lv, err := levelsOf(coords, ext, tc.levels)
		require.NoError(t, err)
		require.Len(t, lv.Coords, tc.levels)
		cs, ex := coords, ext
		for l := 1; l < tc.levels; l++ {
			m, err := kmap.NewStrided(cs, ex, downConv, nil)
			require.NoError(t, err)
			require.Equal(t, m.Out, lv.Extents[l], "level %d grid", l)
			require.Equal(t, append([]int32{}, m.OutCoords...), append([]int32{}, lv.Coords[l]...), "level %d coordinates", l)
			cs, ex = m.OutCoords, m.Out
		}
	}
}

// TestMapsOnDeviceEqualHostMaps builds a batch's maps from its level
// coordinates on the fake device (which builds maps, as the CUDA engine
// does) and compares every map with BuildMaps'; Prepare on such a device
// leaves the maps to the step, and a training step uploads coordinates,
// features and labels only.
func TestMapsOnDeviceEqualHostMaps(t *testing.T) {
	d, err := device.OpenFake()
	require.NoError(t, err)
	defer d.Close()
	require.True(t, d.BuildsMaps())
	require.False(t, device.Host().BuildsMaps())

	m, err := New(tinyConfig(), 3)
	require.NoError(t, err)
	host := tinyData(t, m, 1)[0]
	require.NoError(t, m.Place(d))
	s, err := m.Prepare(host.Batch, 16)
	require.NoError(t, err)
	require.Nil(t, s.Maps)
	require.NotNil(t, s.Levels)

	st, err := d.BeginStep()
	require.NoError(t, err)
	mp, err := BuildMapsOn(d, s.Levels)
	require.NoError(t, err)
	var coordBytes int64
	for _, c := range s.Levels.Coords {
		coordBytes += int64(len(c)) * 4
	}
	require.Equal(t, coordBytes, st.Transfers().Up[device.Inputs])
	require.NoError(t, st.End())

	same := func(name string, a, b *kmap.Map) {
		t.Helper()
		require.NoError(t, a.Load())
		require.Equal(t, b.Kind, a.Kind, name)
		require.Equal(t, b.NIn, a.NIn, name)
		require.Equal(t, b.NOut, a.NOut, name)
		require.Equal(t, b.Nbr, a.Nbr, name)
	}
	same("head", mp.Head, host.Maps.Head)
	for l := range mp.Sub {
		same("sub", mp.Sub[l], host.Maps.Sub[l])
		if l > 0 {
			same("down", mp.Down[l], host.Maps.Down[l])
			same("up", mp.Up[l-1], host.Maps.Up[l-1])
		}
	}

	// A step on the prepared sample builds its maps in the step.
	tr, err := NewTrainer(m, 0.01)
	require.NoError(t, err)
	res, err := tr.Step(s)
	require.NoError(t, err)
	require.NotNil(t, s.Maps)
	n := int64(s.Batch.N())
	require.Equal(t, coordBytes+n*int64(m.Config.InChannels)*4+n*4, res.Transfers.Up[device.Inputs])
	// Fake-built maps are host maps (its emulation builds them with kmap);
	// on the CUDA engine HostTableBytes is 0 (ops/device GPU tests).

	// A grid too small for the levels is a configuration error.
	_, err = levelsOf(nil, grid.Extent{Batch: 1, X: 3, Y: 3, Z: 3}, 3)
	require.ErrorIs(t, err, ErrConfig)

	_, err = BuildMapsOn(d, &Levels{})
	require.ErrorIs(t, err, ErrConfig)
}
