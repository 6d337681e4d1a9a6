//go:build cudaext

package main

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/flexgemm-go/flexgemm/cudaext"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// This file is the GPU half of the bench (build tag cudaext): -device cuda
// runs the workloads on the CUDA engine. Features, weights and the upstream
// gradient live on the device (fp16 and bf16 are rounded on upload), the
// kernel map is rebuilt inside every timed step (on the GPU by default),
// repeats are timed with CUDA events and the memory peak is the engine
// allocator's.

func init() { openers[deviceCUDA] = openCUDA }

// openCUDA opens GPU o.gpu with the CUDA engine (which registers itself
// with package sparse, so sparse.Conv routes device matrices to it).
func openCUDA(o *runOptions) (*backend, error) {
	e, err := cudaext.Open(o.gpu)
	if err != nil {
		return nil, err
	}
	info := e.Info()
	be := &backend{
		name:   deviceCUDA,
		device: cudaDevice(info),
		place: func(m sparse.Matrix, dt dtypeInfo) (sparse.Matrix, error) {
			return e.ToDeviceAs(m, dt.device)
		},
		fill: func(dt dtypeInfo, rows, cols int, v float64) (sparse.Matrix, error) {
			m, err := e.Alloc(dt.device, rows, cols)
			if err != nil {
				return m, err
			}
			if err := e.Fill(m, float32(v)); err != nil {
				e.Free(m)
				return sparse.Matrix{}, err
			}
			return m, nil
		},
		free:  e.Free,
		begin: func(dt dtypeInfo) { e.SetTF32(dt.tf32) },
		// Auto stays Auto: the engine's autotuner picks the kernel per layer
		// and direction, and derives on the device whatever tables it needs.
		resolve: func(a sparse.Algorithm) sparse.Algorithm { return a },
		sync:    e.Synchronize,
		newTimer: func() (repeatTimer, error) {
			t, err := e.NewTimer()
			if err != nil {
				return nil, err
			}
			return eventTimer{t}, nil
		},
		resetPeak: e.ResetPeak,
		peakGB:    func() float64 { return float64(e.MemStats().PeakInUse) / (1 << 30) },
		maps: func(sc scene, kind string) (*mapSource, error) {
			if kind == kmapGPU {
				return gpuMaps(e, sc)
			}
			return hostMaps(sc, kmapUpload, e.ForgetMap), nil
		},
		afterFailure: func() {
			// Free what the failed step left to the GC, then give the
			// cache back, so the next configuration starts clean.
			runtime.GC()
			_ = e.ReleaseCache()
		},
		close:     func() { _ = e.Close() },
		kmapKinds: []string{kmapGPU, kmapCPU},
		prof:      cudaProfiler(e),
	}
	if strings.Contains(info.Name, "H200") {
		be.peakTFLOPS = h200TFLOPS
	}
	if o.power {
		m, err := openNVMLMeter(info.PCIBusID)
		if err != nil {
			_ = e.Close()
			return nil, fmt.Errorf("-power: %w", err)
		}
		be.power = m
		closeEngine := be.close
		be.close = func() { m.close(); closeEngine() }
	}
	return be, nil
}

// cudaProfiler times the phases of a step with the engine's profiler
// (cudaext.Engine.StartProfile).
func cudaProfiler(e *cudaext.Engine) *stepProfiler {
	return &stepProfiler{
		start: e.StartProfile,
		mark:  e.Phase,
		stop: func() ([]phaseTime, error) {
			p, err := e.StopProfile()
			if err != nil {
				return nil, err
			}
			out := make([]phaseTime, len(p.Phases))
			for i, ph := range p.Phases {
				ks := map[string]kernelTime{}
				for _, k := range ph.Kernels {
					ks[k.Name] = kernelTime{launches: k.Launches, ms: k.Ms}
				}
				out[i] = phaseTime{name: ph.Name, spanMs: ph.SpanMs, kernelMs: ph.KernelMs, hostMs: ph.HostMs, kernels: ks}
			}
			return out, nil
		},
	}
}

// cudaDevice describes a GPU for Record.Device.
func cudaDevice(info cudaext.DeviceInfo) string {
	return fmt.Sprintf("cuda: %s, sm_%d%d, %d SMs, %.0f GiB, driver %d",
		info.Name, info.Major, info.Minor, info.SMs, float64(info.TotalMem)/(1<<30), info.DriverVersion)
}

// eventTimer times a repeat with two CUDA events on the engine's stream.
type eventTimer struct{ t *cudaext.Timer }

func (t eventTimer) start() error { return t.t.Start() }

func (t eventTimer) stop() (float64, error) {
	ms, err := t.t.Stop()
	return float64(ms), err
}

func (t eventTimer) destroy() { t.t.Destroy() }

// gpuMaps builds the kernel maps of sc on the GPU: the coordinates are
// uploaded once; every map is built by the engine's device builders (each
// level from the previous level's device output coordinates), and the
// derived tables a step reads (masks with Gray order, pair lists) are
// derived on the device from the device table, so nothing of the map is
// computed on or downloaded to the host (the maps' host tables stay on the
// device, see kmap.Map.Load). A step ends with ReleaseMap, which drops the
// device tables without copying them back.
func gpuMaps(e *cudaext.Engine, sc scene) (*mapSource, error) {
	dc, err := e.ToDevice(sparse.Matrix{Rows: len(sc.coords) / 4, Cols: 4, Data: sc.coords})
	if err != nil {
		return nil, fmt.Errorf("uploading the coordinates: %w", err)
	}
	return &mapSource{
		kind: kmapGPU,
		submanifold: func() (*kmap.Map, error) {
			return e.SubmanifoldMap(dc, sc.ext, kernel3, dilation1)
		},
		strided: func(prev *kmap.Map, conv grid.Conv) (*kmap.Map, error) {
			if prev == nil {
				return e.StridedMap(dc, sc.ext, conv, sparse.Matrix{})
			}
			c, err := e.OutCoords(prev)
			if err != nil {
				return nil, err
			}
			defer e.Free(c)
			return e.StridedMap(c, prev.Out, conv, sparse.Matrix{})
		},
		prepare: func(m *kmap.Map, use tableUse) error {
			var t cudaext.Tables
			if use.pairs {
				t |= cudaext.TablePairs
			}
			if use.masked {
				t |= cudaext.TableMasked
			}
			if use.reverseMasked {
				t |= cudaext.TableReverseMasked
			}
			if t == 0 {
				return nil
			}
			return e.DeriveTables(m, t)
		},
		release: e.ReleaseMap,
		close:   func() { e.Free(dc) },
	}, nil
}
