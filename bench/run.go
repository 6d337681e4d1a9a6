package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// config is one (RES, C, L) triple, written "RES,C,L" as in the anchor
// script's CFGS variable.
type config struct{ RES, C, L int }

// defaultConfigs is a CPU-sized subset of FlexGEMM's grid (which runs
// C = 1024 at small RES).
const defaultConfigs = "8,64,2;16,64,2;32,64,2;64,64,2"

// parseConfigs parses "RES,C,L;RES,C,L;…".
func parseConfigs(s string) ([]config, error) {
	var out []config
	for part := range strings.SplitSeq(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := strings.Split(part, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("config %q: want RES,C,L", part)
		}
		var v [3]int
		for i, x := range f {
			n, err := strconv.Atoi(strings.TrimSpace(x))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("config %q: %q is not a positive integer", part, x)
			}
			v[i] = n
		}
		out = append(out, config{v[0], v[1], v[2]})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no configs in %q", s)
	}
	return out, nil
}

// parseInts parses a comma-separated list of positive integers (bench
// tune, bench padding).
func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range parseList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func parseAlgos(s string) ([]sparse.Algorithm, error) {
	if s == "all" {
		return sparse.Algorithms, nil
	}
	var out []sparse.Algorithm
	for _, name := range parseList(s) {
		a, err := sparse.ParseAlgorithm(name)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, errors.New("no algorithm given")
	}
	return out, nil
}

// runOptions are the parsed flags of the measuring command.
type runOptions struct {
	cfgs        []config
	ops         []string
	modes       []string
	dtypes      []dtypeInfo
	algos       []sparse.Algorithm
	batch       int
	coordsFile  string
	seed        uint64
	conv        sparse.ConvOptions
	measure     measureOpts
	out         string
	commit      string
	impl        string
	device      string  // deviceCPU or deviceCUDA
	gpu         int     // GPU ordinal
	kmap        string  // kmapAuto until openBackend resolves it
	peakTFLOPS  float64 // -peaktflops (0: by device)
	phases      int     // profiled steps per record (-phases, -phasesteps); 0: none
	phasesChain bool    // profile them back to back (-phaseschain)
	power       bool    // measure energy and clocks of the timed steps (-power, -device cuda)
	wgrad       string  // -wgrad: wgradAuto, wgradNarrow or wgradF32
	backward    string  // -backward: backwardInputFirst or backwardParamsFirst
}

// Orders of a train step's gradients within a layer (-backward).
const (
	// backwardInputFirst computes a layer's input gradient, then its
	// weight and bias gradients: FlexGEMM's order (its backward computes
	// grad_input before grad_weight), so a transient of the input gradient
	// (a transposed weight, split-K partials) never coexists with the
	// layer's own weight gradient.
	backwardInputFirst = "input-first"
	// backwardParamsFirst computes the weight and bias gradients first,
	// the order of every run before the fifty-ninth session.
	backwardParamsFirst = "params-first"
)

// Weight-gradient element types of a train step (-wgrad).
const (
	wgradAuto   = "auto"   // narrow for fp16 and bf16 (FlexGEMM's .grad), else fp32
	wgradNarrow = "narrow" // the input's element type (sparse.ConvOptions.NarrowWeightGrad)
	wgradF32    = "fp32"   // float32 whatever the input (the engine's default)
)

// wgradDTypeName names the element type of the weight gradients of train
// steps of dt under -wgrad kind, by the engines' rule
// (sparse.WeightGradDType); tf32 stores float32.
func wgradDTypeName(kind string, dt dtypeInfo) string {
	if sparse.WeightGradDType(dt.device, narrowWeightGrad(kind, dt)) != dt.device || dt.tf32 {
		return "fp32"
	}
	return dt.name
}

// narrowWeightGrad says whether train steps of dt round their weight
// gradients to dt's element type under -wgrad kind: for every kind but
// fp32, where the engines would widen them (16-bit dtypes).
func narrowWeightGrad(kind string, dt dtypeInfo) bool {
	widened := sparse.WeightGradDType(dt.device, false) != dt.device
	return widened && kind != wgradF32
}

func parseRunFlags(args []string, stderr io.Writer) (*runOptions, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgs := fs.String("cfgs", defaultConfigs, "configs `RES,C,L;…` (the anchor's CFGS syntax)")
	ops := fs.String("op", opSubm, "workloads, comma-separated: "+strings.Join(allOps, ", "))
	modes := fs.String("modes", "train,infer", "modes, comma-separated: train, infer; for subm_conv also map (the kernel-map build of an inference step alone) and infer_nomap (an inference step's convolutions over a map built once, before the timing): with -power they split an inference step's energy")
	device := fs.String("device", deviceCPU, "where to run: cpu (pure-Go engine) or cuda (CUDA engine; needs a bench built with -tags cudaext)")
	gpu := fs.Int("gpu", 0, "GPU ordinal for -device cuda")
	kmapKind := fs.String("kmap", kmapAuto, "kernel-map builder inside each step: auto (the device's), cpu (host), gpu (on the device, -device cuda)")
	peakTFLOPS := fs.Float64("peaktflops", 0, "dense tensor-core rate for pct_of_peak (0: 790 on an H200, else not reported)")
	dts := fs.String("dtypes", "fp32", "dtypes, comma-separated: fp32, fp64 (cpu); fp16, bf16, tf32, fp32 (cuda; default fp16 there)")
	algos := fs.String("algo", "auto", "algorithms, comma-separated, or all: auto, explicit_gemm, implicit_gemm, implicit_gemm_splitk, masked_implicit_gemm, masked_implicit_gemm_splitk")
	batch := fs.Int("batch", 1, "batch copies of the sphere shell")
	coords := fs.String("coords", "", "run on the voxels of this int32 [N,4] .npy file instead of the sphere (RES of the configs is then ignored)")
	seed := fs.Uint64("seed", 1, "random seed of features and weights")
	splitK := fs.Int("splitk", 0, "split-K chunks of the split-K algorithms (0: engine default)")
	tileRows := fs.Int("tilerows", 0, "rows per tile of the implicit algorithms (0: engine default)")
	warmups := fs.Int("warmup", 2, "untimed warm-up steps")
	repeats := fs.Int("repeats", 3, "timed repeats; the median is reported")
	iters := fs.Int("iters", 0, "steps per repeat (0: enough for -mintime, at most -maxiters; with -device cuda the default is 20, the anchor's)")
	maxIters := fs.Int("maxiters", 20, "upper bound of the automatic steps per repeat")
	minTime := fs.Duration("mintime", 300*time.Millisecond, "target duration of one repeat when -iters is 0")
	memSample := fs.Bool("memsample", true, "sample the Go heap for peak_mem_gb (else null)")
	out := fs.String("o", "", "also append the JSON lines to this file")
	commit := fs.String("commit", "", "commit id to record (default: vcs.revision or git describe)")
	impl := fs.String("impl", "flexgemm-go", "impl name to record")
	phases := fs.Bool("phases", false, "after timing each record, profile -phasesteps more steps (-device cuda): per-phase device time, kernel time and gaps, in the record's phases field and a table")
	phaseSteps := fs.Int("phasesteps", 3, "profiled steps per record with -phases")
	phasesChain := fs.Bool("phaseschain", false, "with -phases, profile the -phasesteps steps back to back in one profile, as timed steps run (no wait for the device between them, no per-phase memory peaks), so the gaps are the timed steps' idle device")
	power := fs.Bool("power", false, "record the GPU's energy per step, mean board power and SM clock (mean, lowest, share of samples held by the power cap) over the timed steps, read through NVML (-device cuda)")
	backward := fs.String("backward", backwardInputFirst, "order of a train step's gradients within a layer: input-first (the input gradient, then the weight and bias gradients, as FlexGEMM's backward) or params-first")
	wgrad := fs.String("wgrad", wgradAuto, "weight-gradient dtype of train steps: auto (fp16/bf16 gradients of fp16/bf16 inputs, as FlexGEMM's .grad; else fp32), narrow (the input's), fp32 (float32 always, the engine's default)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	devTypes, ok := deviceDTypes[*device]
	if !ok {
		return nil, fmt.Errorf("unknown -device %q (want %s or %s)", *device, deviceCPU, deviceCUDA)
	}
	if *device == deviceCUDA {
		// The anchor's fixed protocol: 20 steps per repeat, fp16.
		if !set["iters"] {
			*iters = 20
		}
		if !set["dtypes"] {
			*dts = "fp16"
		}
	}
	switch *wgrad {
	case wgradAuto, wgradNarrow, wgradF32:
	default:
		return nil, fmt.Errorf("unknown -wgrad %q (want %s, %s or %s)", *wgrad, wgradAuto, wgradNarrow, wgradF32)
	}
	switch *backward {
	case backwardInputFirst, backwardParamsFirst:
	default:
		return nil, fmt.Errorf("unknown -backward %q (want %s or %s)", *backward, backwardInputFirst, backwardParamsFirst)
	}
	switch *kmapKind {
	case kmapAuto, kmapCPU, kmapGPU:
	default:
		return nil, fmt.Errorf("unknown -kmap %q (want %s, %s or %s)", *kmapKind, kmapAuto, kmapCPU, kmapGPU)
	}
	o := &runOptions{batch: *batch, coordsFile: *coords, seed: *seed, out: *out, commit: *commit, impl: *impl,
		device: *device, gpu: *gpu, kmap: *kmapKind, peakTFLOPS: *peakTFLOPS, wgrad: *wgrad, backward: *backward,
		conv:    sparse.ConvOptions{SplitK: *splitK, TileRows: *tileRows},
		measure: measureOpts{warmups: *warmups, repeats: *repeats, iters: *iters, maxIters: *maxIters, minRepeat: *minTime, memSample: *memSample}}
	if *phases {
		if *phaseSteps < 1 {
			return nil, fmt.Errorf("-phasesteps %d must be positive", *phaseSteps)
		}
		if *device != deviceCUDA {
			return nil, fmt.Errorf("-phases needs -device %s (the CPU engine has no profiler)", deviceCUDA)
		}
		o.phases = *phaseSteps
		o.phasesChain = *phasesChain
	} else if *phasesChain {
		return nil, errors.New("-phaseschain needs -phases")
	}
	if *power {
		if *device != deviceCUDA {
			return nil, fmt.Errorf("-power needs -device %s (it reads the GPU's counters through NVML)", deviceCUDA)
		}
		o.power = true
	}
	var err error
	if o.cfgs, err = parseConfigs(*cfgs); err != nil {
		return nil, err
	}
	for _, op := range parseList(*ops) {
		if !contains(allOps, op) {
			return nil, fmt.Errorf("unknown op %q (want %v)", op, allOps)
		}
		o.ops = append(o.ops, op)
	}
	for _, m := range parseList(*modes) {
		if !contains(allModes, m) {
			return nil, fmt.Errorf("unknown mode %q (want one of %v)", m, allModes)
		}
		if contains(submOnlyModes, m) {
			for _, op := range o.ops {
				if op != opSubm {
					return nil, fmt.Errorf("mode %q is defined for op %s only, not %s", m, opSubm, op)
				}
			}
		}
		o.modes = append(o.modes, m)
	}
	for _, d := range parseList(*dts) {
		info, ok := devTypes[d]
		if !ok {
			return nil, fmt.Errorf("dtype %q is not available on -device %s (have %v)", d, *device, keys(devTypes))
		}
		o.dtypes = append(o.dtypes, info)
	}
	if o.algos, err = parseAlgos(*algos); err != nil {
		return nil, err
	}
	switch {
	case len(o.ops) == 0 || len(o.modes) == 0 || len(o.dtypes) == 0:
		return nil, errors.New("need at least one op, mode and dtype")
	case o.batch < 1:
		return nil, fmt.Errorf("-batch %d must be positive", o.batch)
	case o.measure.warmups < 0 || o.measure.repeats < 1 || o.measure.iters < 0 || o.measure.maxIters < 1:
		return nil, errors.New("-warmup ≥ 0, -repeats ≥ 1, -iters ≥ 0 and -maxiters ≥ 1 please")
	case o.conv.SplitK < 0 || o.conv.TileRows < 0:
		return nil, errors.New("-splitk and -tilerows must not be negative")
	case o.gpu < 0:
		return nil, fmt.Errorf("-gpu %d must not be negative", o.gpu)
	case o.peakTFLOPS < 0:
		return nil, fmt.Errorf("-peaktflops %v must not be negative", o.peakTFLOPS)
	case o.device == deviceCPU && o.kmap == kmapGPU:
		return nil, errors.New("-kmap gpu needs -device cuda")
	case o.device != deviceCPU && contains(o.ops, opSample):
		return nil, fmt.Errorf("-op %s runs on the CPU only (its plan is built on the host)", opSample)
	}
	return o, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func keys(m map[string]dtypeInfo) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return sortedStrings(out)
}

// runBench measures every combination and writes JSON lines to stdout (and
// the -o file), then the summary table. It returns the records. A
// combination that fails (out of device memory, say) gets a record with
// Error set instead of a time, and the run goes on; the returned error
// then counts the failures.
func runBench(o *runOptions, stdout, stderr io.Writer) ([]Record, error) {
	var fileSc *scene
	if o.coordsFile != "" {
		sc, err := fileScene(o.coordsFile)
		if err != nil {
			return nil, err
		}
		fileSc = &sc
	}
	be, err := openBackend(o)
	if err != nil {
		return nil, err
	}
	defer be.close()
	outs := []io.Writer{stdout}
	if o.out != "" {
		f, err := os.OpenFile(o.out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		outs = append(outs, f)
	}
	commit := commitID(o.commit)
	peak := o.peakTFLOPS
	if peak == 0 {
		peak = be.peakTFLOPS
	}
	fmt.Fprintf(stderr, "bench: %s, kernel maps: %s, GOMAXPROCS=%d, %s, commit %s\n", be.device, kmapNote(be.kmapLabel), runtime.GOMAXPROCS(0), runtime.Version(), commit)
	var recs []Record
	emit := func(rec Record) error {
		rec.Device, rec.Commit, rec.Kmap = be.device, commit, be.kmapLabel
		if rec.Error == "" && peak > 0 {
			pct := round(100*rec.TFLOPS/peak, 2)
			rec.PctPeak = &pct
		}
		recs = append(recs, rec)
		for _, out := range outs {
			if err := writeRecord(out, rec); err != nil {
				return err
			}
		}
		return nil
	}
	failed, total := 0, 0
	// fail reports one failed measurement as a record and tries to leave
	// the device usable for the next one.
	fail := func(rec Record, what string, err error) error {
		fmt.Fprintf(stderr, "bench: failed %s %s %s RES=%d C=%d L=%d %s %s: %v\n", what, rec.Op, rec.Mode, rec.RES, rec.C, rec.L, rec.DType, rec.Algo, err)
		failed++
		rec.Error = err.Error()
		rec.Time = time.Now().UTC().Format(time.RFC3339)
		be.afterFailure()
		return emit(rec)
	}
	for _, op := range o.ops {
		done := map[config]bool{}
		for _, cfg := range o.cfgs {
			if op == opSample {
				cfg.L = 1 // grid sample has no layers
			}
			if fileSc != nil {
				cfg.RES = fileSc.res
			}
			if done[cfg] {
				continue
			}
			done[cfg] = true
			sc := fileSc
			if sc == nil {
				coords, ext := synth.SphereShell(cfg.RES, o.batch)
				sc = &scene{coords: coords, ext: ext, res: cfg.RES, source: "sphere"}
			}
			src, srcErr := be.maps(*sc, o.kmap)
			for _, dt := range o.dtypes {
				be.begin(dt)
				algos := o.algos
				if op == opSample {
					algos = algos[:1] // the convolution algorithm does not apply
				}
				for _, algo := range algos {
					algoName := algo.String()
					if op == opSample {
						algoName = sparse.Trilinear.String()
					}
					base := Record{Impl: o.impl, Algo: algoName, DType: dt.name, RES: sc.res, C: cfg.C, L: cfg.L, Op: op,
						Batch: sc.ext.Batch, Source: sc.source, Procs: runtime.GOMAXPROCS(0), GoVersion: runtime.Version()}
					var w *workload
					err := srcErr
					if err == nil {
						p := params{op: op, C: cfg.C, L: cfg.L, dtype: dt, conv: o.conv, paramsFirst: o.backward == backwardParamsFirst, seed: o.seed, be: be, maps: src}
						p.conv.Algorithm = algo
						p.conv.NarrowWeightGrad = narrowWeightGrad(o.wgrad, dt)
						err = safely(func() (err error) { w, err = newWorkload(*sc, p); return err })
					}
					if err != nil {
						for _, mode := range o.modes {
							total++
							rec := base
							rec.Mode = mode
							if err := fail(rec, "setting up", err); err != nil {
								return recs, err
							}
						}
						continue
					}
					base.N, base.Pairs, base.L = w.n, w.pairs, w.l
					for _, mode := range o.modes {
						fmt.Fprintf(stderr, "bench: %s %s %s %s RES=%d C=%d L=%d N=%d …\n", op, mode, dt.name, algoName, sc.res, cfg.C, cfg.L, w.n)
						total++
						var t timing
						err := safely(func() (err error) { t, err = measure(w.steps[mode], o.measure, be); return err })
						if err != nil {
							rec := base
							rec.Mode = mode
							if err := fail(rec, "measuring", err); err != nil {
								w.close()
								return recs, err
							}
							continue
						}
						rec := makeRecord(o, op, mode, dt.name, algoName, *sc, cfg, w, t)
						if mode == modeTrain && op != opSample {
							rec.WGradDType = wgradDTypeName(o.wgrad, dt)
							if o.backward != backwardInputFirst {
								rec.Backward = o.backward
							}
						}
						if o.phases > 0 {
							var ps *PhaseSummary
							err := safely(func() (err error) { ps, err = profileSteps(w.steps[mode], be, o.phases, o.phasesChain); return err })
							if err != nil {
								// The timed record stands; the profile is extra.
								fmt.Fprintf(stderr, "bench: profiling %s %s RES=%d C=%d L=%d: %v\n", op, mode, sc.res, cfg.C, cfg.L, err)
							}
							rec.Phases = ps
						}
						if err := emit(rec); err != nil {
							w.close()
							return recs, err
						}
					}
					w.close()
				}
			}
			if srcErr == nil {
				src.close()
			}
		}
	}
	fmt.Fprintln(stdout)
	writeSummary(stdout, recs)
	writePhaseSummary(stdout, recs)
	if failed > 0 {
		return recs, fmt.Errorf("%d of %d measurements failed (see the messages above and the records' error fields)", failed, total)
	}
	return recs, nil
}

// safely runs f, turning a panic into an error, so one broken
// configuration becomes an error record rather than ending the run.
func safely(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// kmapNote says what a Record.Kmap value means, for the log.
func kmapNote(kind string) string {
	switch kind {
	case kmapCPU:
		return "built on the host (package kmap) in every step"
	case kmapGPU:
		return "built on the GPU in every step (SubmanifoldMap/StridedMap; the tables stay on the device, derived tables by DeriveTables, only the pair-segment counts, (V−1)/2+1 of a submanifold map, are read back)"
	case kmapUpload:
		return "built on the host in every step; the engine uploads Nbr and derives Rev, pairs and masks on the device"
	}
	return kind
}

func makeRecord(o *runOptions, op, mode, dtype, algo string, sc scene, cfg config, w *workload, t timing) Record {
	msAll := make([]float64, len(t.msAll))
	for i, v := range t.msAll {
		msAll[i] = round(v, 4)
	}
	rec := Record{
		Impl: o.impl, Algo: algo, Mode: mode, DType: dtype, RES: sc.res, C: cfg.C, L: w.l, N: w.n, Pairs: w.pairs,
		MS: round(t.ms, 4), MSAll: msAll, TFLOPS: round(w.flops[mode]/t.ms/1e9, 6),
		WarmupS: round(t.warmup.Seconds(), 3), Op: op, FLOPs: w.flops[mode], Iters: t.iters, Batch: sc.ext.Batch,
		Source: sc.source, Procs: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(),
		Time: time.Now().UTC().Format(time.RFC3339),
	}
	if t.peak != nil {
		gb := round(*t.peak, 4)
		rec.PeakMemGB = &gb
	}
	if t.allocMB != nil {
		mb := round(*t.allocMB, 3)
		rec.AllocMBPerStep = &mb
	}
	if p := t.power; p != nil {
		r := *p
		r.SMMHzMean, r.CappedFraction = round(p.SMMHzMean, 1), round(p.CappedFraction, 3)
		if p.PowerWMean != nil {
			w, j := round(*p.PowerWMean, 1), round(*p.EnergyJPerStep, 4)
			r.PowerWMean, r.EnergyJPerStep = &w, &j
		}
		rec.Power = &r
	}
	return rec
}
