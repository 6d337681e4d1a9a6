//go:build cudaext

package device_test

import (
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/flexgemm-go/flexgemm/ops/device"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// tracedStep runs one forward+backward of the small UNet on d with every
// node's value kept (gorgonia.TraceExec) and returns the host copies of
// the float32-typed node values, in graph order, with the node names.
func tracedStep(t *testing.T, d *device.Device, cfg netConfig, ps []param, b *batch, scale float64) (names []string, vals [][]float32) {
	params := toDevice(t, d, ps)
	st, err := d.BeginStep()
	require.NoError(t, err)
	defer func() { require.NoError(t, st.End()) }()
	nt := stepNet(t, d, cfg, params, b, scale)
	vm := gorgonia.NewTapeMachine(nt.g, d.VMOpt(), gorgonia.TraceExec())
	defer vm.Close()
	require.NoError(t, vm.RunAll())
	for _, n := range nt.g.AllNodes() {
		v := n.Value()
		dv, ok := v.(*tensor.Dense)
		if !ok || dv.Dtype() != tensor.Float32 {
			continue
		}
		h, err := d.ToHost(dv, device.Other)
		require.NoError(t, err)
		names = append(names, fmt.Sprintf("%s %v", n.Name(), n.Shape()))
		vals = append(vals, append([]float32(nil), h.Data().([]float32)...))
	}
	return names, vals
}

// TestGPUStepNodeByNode is a diagnostic (FLEXGEMM_DIAG=1): it runs the
// sphere-scene training step in each narrow dtype on the GPU and on the
// CPU emulation and logs, in graph order, every node whose values differ
// by more than 4 units of the dtype's rounding, so a disagreement in the
// training-step test can be traced to the first op that produces it.
func TestGPUStepNodeByNode(t *testing.T) {
	if os.Getenv("FLEXGEMM_DIAG") == "" {
		t.Skip("diagnostic: set FLEXGEMM_DIAG=1")
	}
	cfg := smallNet
	coords, ext := synth.SphereShell(24, 2)
	b := newBatch(t, cfg, coords, ext, 3)
	ps := newParams(cfg, 2)
	for _, tc := range []struct {
		act   sparse.DType
		scale float64
		ulp   float64
	}{{sparse.Float32, 1, 1e-6}, {sparse.Float16, 1024, 1.0 / 2048}, {sparse.BFloat16, 1, 1.0 / 256}} {
		g := openGPU(t, tc.act)
		gn, gv := tracedStep(t, g, cfg, ps, b, tc.scale)
		g.Close()
		// float32 against the host, narrow dtypes against the emulation.
		f := device.Host()
		if tc.act != sparse.Float32 {
			var err error
			f, err = device.OpenFake(device.WithActivations(tc.act))
			require.NoError(t, err)
		}
		fn, fv := tracedStep(t, f, cfg, ps, b, tc.scale)
		if f != device.Host() {
			f.Close()
		}
		require.Equal(t, fn, gn)
		var rows []string
		for i := range gn {
			e := relErr(gv[i], fv[i])
			if e > 4*tc.ulp || len(rows) < 3 {
				// Sign disagreements (ReLU masks that flip) and the
				// largest element difference.
				flips, worst := 0, 0.0
				for j := range gv[i] {
					if (gv[i][j] > 0) != (fv[i][j] > 0) {
						flips++
					}
					worst = max(worst, math.Abs(float64(gv[i][j])-float64(fv[i][j])))
				}
				rows = append(rows, fmt.Sprintf("%4d %-60.60s %.2e  sign flips %d  max |diff| %.2e", i, gn[i], e, flips, worst))
			}
		}
		t.Logf("%v: %d float32-typed nodes; nodes with rel.err > %.1e (GPU vs emulation):\n%s", tc.act, len(gn), 4*tc.ulp, strings.Join(rows, "\n"))
	}
}

// TestGPUStepDeterministic runs the same training step of the small UNet
// three times on the GPU (each on a freshly opened device, in one process)
// for every activation dtype and requires the same bits in every node of
// the graph: loss, activations, gradients. On a difference it names the
// first node, in graph order, that differs.
func TestGPUStepDeterministic(t *testing.T) {
	cfg := smallNet
	coords, ext := synth.SphereShell(24, 2)
	b := newBatch(t, cfg, coords, ext, 3)
	ps := newParams(cfg, 2)
	for _, act := range append([]sparse.DType{0}, dtypes...) {
		name := "host"
		if act != 0 {
			name = act.String()
		}
		t.Run(name, func(t *testing.T) {
			var names []string
			var first [][]float32
			for run := range 3 {
				g := device.Host()
				if act != 0 {
					g = openGPU(t, act)
				}
				n, v := tracedStep(t, g, cfg, ps, b, 1)
				if act != 0 {
					require.NoError(t, g.Close())
				}
				if run == 0 {
					names, first = n, v
					continue
				}
				require.Equal(t, names, n)
				for i := range v {
					for j := range v[i] {
						if math.Float32bits(v[i][j]) != math.Float32bits(first[i][j]) {
							t.Fatalf("run %d: node %d %s differs at element %d: %g, first run %g", run, i, n[i], j, v[i][j], first[i][j])
						}
					}
				}
			}
		})
	}
}
