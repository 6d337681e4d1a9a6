//go:build cudaext

package device_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/internal/maptest"
	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
)

// TestGPUMapsOfDeviceCoordinates is TestMapsOfDeviceCoordinatesOnFake on
// the GPU: inside a step, coordinates are the only upload (Inputs) and
// every map of a UNet — submanifold, strided (generated and given
// outputs), its inverse, transposed — is built on the device from them
// (the maps keep their tables there: a Source, nothing loaded, no
// transfer the Device counts). The step's end releases the coordinates;
// in the next step convolutions with the maps (forward, input and weight
// gradients) equal the host's with the host builders' maps and load no
// host table, and finally each map, loaded, equals the host builders'
// entry for entry.
func TestGPUMapsOfDeviceCoordinates(t *testing.T) {
	for _, sc := range mapScenes() {
		t.Run(sc.name, func(t *testing.T) {
			d := openGPU(t, sparse.Float32)
			defer d.Close()
			d.SetProfiling(true)
			st, err := d.BeginStep()
			require.NoError(t, err)
			dc, err := d.Upload(sparse.Matrix{Rows: len(sc.coords) / 4, Cols: 4, Data: sc.coords}, sparse.Int32, device.Inputs)
			require.NoError(t, err)
			before := d.Transfers()
			ms := buildSceneMaps(t, d, sc, dc)
			var want device.Transfers
			want.Up[device.Inputs] = int64(ms.host[1].NOut) * 16
			require.Equal(t, want, d.Transfers().Sub(before), "only the given output coordinates were uploaded")
			require.Equal(t, 4, d.Profile()["kmap"].Calls, "four builds through the proxy; the inverse is built by the engine holding the strided map")
			for i, m := range ms.dev {
				require.NotNil(t, m.Source, "%s: built on the device", ms.names[i])
				require.False(t, m.Loaded(), "%s: no host table downloaded", ms.names[i])
			}
			require.NoError(t, st.End())
			_, err = d.Download(dc, device.Other)
			require.Error(t, err, "the step released the coordinates")

			st2, err := d.BeginStep()
			require.NoError(t, err)
			defer st2.End()
			for i, m := range ms.dev {
				t.Run(ms.names[i], func(t *testing.T) {
					convOnDevice(t, d, m, ms.host[i], 1e-4)
					require.False(t, m.Loaded(), "a convolution on the device loads no host table")
					maptest.RequireSameMap(t, ms.host[i], m)
				})
			}
		})
	}
}
