package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// The devices (-device) and kernel-map builders (-kmap, Record.Kmap).
const (
	deviceCPU  = "cpu"
	deviceCUDA = "cuda"

	kmapAuto   = "auto"       // the device's own builder
	kmapCPU    = "cpu"        // host builder (package kmap)
	kmapGPU    = "gpu"        // device builder (cudaext), tables derived on the device
	kmapUpload = "cpu+upload" // host builder, tables uploaded by the device engine
)

// dtypeInfo describes a benchmark dtype: how its data is generated on the
// host and stored where the workload computes.
type dtypeInfo struct {
	name   string
	host   sparse.DType // element type of the generated host data
	device sparse.DType // element type where the workload computes
	tf32   bool         // float32 with tf32 tensor cores (FlexGEMM's allow_tf32)
}

// deviceDTypes are the dtypes of each device. The CUDA names follow the
// anchor: fp32 is IEEE float32, tf32 float32 storage with tf32 tensor
// cores; fp16 and bf16 are generated as float32 and rounded on upload.
var deviceDTypes = map[string]map[string]dtypeInfo{
	deviceCPU: {
		"fp32": {"fp32", sparse.Float32, sparse.Float32, false},
		"fp64": {"fp64", sparse.Float64, sparse.Float64, false},
	},
	deviceCUDA: {
		"fp16": {"fp16", sparse.Float32, sparse.Float16, false},
		"bf16": {"bf16", sparse.Float32, sparse.BFloat16, false},
		"tf32": {"tf32", sparse.Float32, sparse.Float32, true},
		"fp32": {"fp32", sparse.Float32, sparse.Float32, false},
	},
}

// tableUse says which tables derived from a kernel map the convolutions of
// a step read, so a device builder can derive exactly those.
type tableUse struct {
	masked        bool // Gray order and tile tap unions of Nbr (masked forward)
	reverseMasked bool // the same of the reverse table (masked input gradient)
	pairs         bool // per-tap pair lists (weight gradient)
}

// tablesFor returns the tables that algorithm a (already resolved, not
// Auto) reads in a step: the forward always, the weight gradient when
// training, the input gradient when training with dgrad.
func tablesFor(a sparse.Algorithm, train, dgrad bool) tableUse {
	masked := a == sparse.MaskedImplicit || a == sparse.MaskedImplicitSplitK
	return tableUse{
		masked:        masked,
		reverseMasked: masked && train && dgrad,
		pairs:         train && a != sparse.Explicit,
	}
}

// mapSource builds the kernel maps of one scene, inside every timed step.
type mapSource struct {
	// kind is Record.Kmap.
	kind string
	// submanifold builds the 3×3×3 submanifold map of the scene.
	submanifold func() (*kmap.Map, error)
	// strided builds the map of conv over the outputs of prev (over the
	// scene when prev is nil).
	strided func(prev *kmap.Map, conv grid.Conv) (*kmap.Map, error)
	// prepare makes the derived tables in use available to the engine
	// (a no-op where the engine derives them itself).
	prepare func(m *kmap.Map, use tableUse) error
	// release drops the engine's copies of m's tables.
	release func(m *kmap.Map)
	// close frees what the source holds (device coordinates).
	close func()
}

// hostMaps builds maps with package kmap on the host; kind is kmapCPU for
// the CPU engine and kmapUpload for a device engine that uploads the table
// (and derives the other tables on the device) as it needs; forget drops the
// device copies.
func hostMaps(sc scene, kind string, forget func(*kmap.Map)) *mapSource {
	return &mapSource{
		kind: kind,
		submanifold: func() (*kmap.Map, error) {
			return kmap.NewSubmanifold(sc.coords, sc.ext, kernel3, dilation1)
		},
		strided: func(prev *kmap.Map, conv grid.Conv) (*kmap.Map, error) {
			if prev == nil {
				return kmap.NewStrided(sc.coords, sc.ext, conv, nil)
			}
			return kmap.NewStrided(prev.OutCoords, prev.Out, conv, nil)
		},
		prepare: func(*kmap.Map, tableUse) error { return nil },
		release: forget,
		close:   func() {},
	}
}

// repeatTimer times one repeat of steps.
type repeatTimer interface {
	// start begins a repeat (work queued before it is not counted).
	start() error
	// stop ends the repeat and returns its milliseconds.
	stop() (float64, error)
	// destroy releases the timer.
	destroy()
}

// backend is the processor the workloads run on: the host (package
// sparse's CPU engine) or a GPU engine (-device cuda, build tag cudaext).
type backend struct {
	name   string // deviceCPU or deviceCUDA
	device string // Record.Device
	// peakTFLOPS is the device's dense tensor rate for Record.PctPeak
	// (0: not reported).
	peakTFLOPS float64
	// place moves a host matrix of dt.host data to where the workload
	// computes, as dt.device.
	place func(m sparse.Matrix, dt dtypeInfo) (sparse.Matrix, error)
	// fill returns a [rows, cols] matrix of dtype dt with every element v.
	fill func(dt dtypeInfo, rows, cols int, v float64) (sparse.Matrix, error)
	// free releases matrices the workload made (a no-op on the host).
	free func(ms ...sparse.Matrix)
	// begin selects the arithmetic of dt (tf32 on or off).
	begin func(dt dtypeInfo)
	// resolve maps sparse.Auto to the algorithm the engine runs.
	resolve func(a sparse.Algorithm) sparse.Algorithm
	// sync waits for queued work.
	sync func() error
	// newTimer returns a timer of one repeat.
	newTimer func() (repeatTimer, error)
	// resetPeak and peakGB measure the device memory peak; nil peakGB:
	// sample the Go heap instead.
	resetPeak func()
	peakGB    func() float64
	// maps returns the kernel-map builder of kind kmapCPU, kmapGPU or
	// kmapUpload for a scene.
	maps func(sc scene, kind string) (*mapSource, error)
	// afterFailure tries to leave the device usable after a failed
	// measurement (drops cached memory).
	afterFailure func()
	// close releases the device.
	close func()
	// kmapKinds are the builders this backend offers (-kmap values); the
	// first is the default (-kmap auto).
	kmapKinds []string
	// kmapLabel is Record.Kmap of the chosen builder (set by openBackend).
	kmapLabel string
	// prof profiles the phases of a step (-phases); nil where the device
	// has no profiler.
	prof *stepProfiler
	// power measures energy and clocks over the timed steps (-power); nil
	// when not asked for.
	power powerMeter
}

// openers open the devices of this build; the cudaext build adds
// deviceCUDA.
var openers = map[string]func(o *runOptions) (*backend, error){
	deviceCPU: func(*runOptions) (*backend, error) { return cpuBackend(), nil },
}

// openBackend opens the device o asks for.
func openBackend(o *runOptions) (*backend, error) {
	open, ok := openers[o.device]
	if !ok {
		if o.device == deviceCUDA {
			return nil, fmt.Errorf("-device %s: this bench was built without the CUDA engine; build it with `go build -tags cudaext -o .gpu/bench ./bench`", o.device)
		}
		return nil, fmt.Errorf("unknown -device %q (want %s or %s)", o.device, deviceCPU, deviceCUDA)
	}
	be, err := open(o)
	if err != nil {
		return nil, fmt.Errorf("-device %s: %w", o.device, err)
	}
	kind := o.kmap
	if kind == kmapAuto {
		kind = be.kmapKinds[0]
	}
	if !contains(be.kmapKinds, kind) {
		be.close()
		return nil, fmt.Errorf("-kmap %s is not available on -device %s (have %s)", o.kmap, o.device, strings.Join(be.kmapKinds, ", "))
	}
	o.kmap = kind
	be.kmapLabel = kind
	if kind == kmapCPU && be.name != deviceCPU {
		be.kmapLabel = kmapUpload
	}
	return be, nil
}

// cpuBackend runs on the host with package sparse's CPU engine.
func cpuBackend() *backend {
	return &backend{
		name:   deviceCPU,
		device: cpuDevice(),
		place:  func(m sparse.Matrix, _ dtypeInfo) (sparse.Matrix, error) { return m, nil },
		fill: func(dt dtypeInfo, rows, cols int, v float64) (sparse.Matrix, error) {
			return hostMatrix(dt, rows, cols, constant(v))
		},
		free:         func(...sparse.Matrix) {},
		begin:        func(dtypeInfo) {},
		resolve:      func(a sparse.Algorithm) sparse.Algorithm { return a },
		sync:         func() error { return nil },
		newTimer:     func() (repeatTimer, error) { return &wallTimer{sync: func() error { return nil }}, nil },
		maps:         func(sc scene, _ string) (*mapSource, error) { return hostMaps(sc, kmapCPU, func(*kmap.Map) {}), nil },
		afterFailure: func() {},
		close:        func() {},
		kmapKinds:    []string{kmapCPU},
	}
}

// wallTimer times a repeat with the host clock, waiting for the device at
// both ends.
type wallTimer struct {
	sync func() error
	t0   time.Time
}

func (w *wallTimer) start() error {
	if err := w.sync(); err != nil {
		return err
	}
	w.t0 = time.Now()
	return nil
}

func (w *wallTimer) stop() (float64, error) {
	if err := w.sync(); err != nil {
		return 0, err
	}
	return float64(time.Since(w.t0).Nanoseconds()) / 1e6, nil
}

func (w *wallTimer) destroy() {}
