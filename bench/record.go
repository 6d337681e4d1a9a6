package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// Record is one measurement, one JSON line. The fields up to WarmupS carry
// the anchor script's names and meaning.
type Record struct {
	Impl      string    `json:"impl"`
	Algo      string    `json:"algo"`
	Mode      string    `json:"mode"`
	DType     string    `json:"dtype"`
	RES       int       `json:"RES"`
	C         int       `json:"C"`
	L         int       `json:"L"`
	N         int       `json:"N"`
	Pairs     int64     `json:"pairs"`
	MS        float64   `json:"ms"`
	MSAll     []float64 `json:"ms_all,omitempty"`
	TFLOPS    float64   `json:"tflops"`
	PeakMemGB *float64  `json:"peak_mem_gb"`
	WarmupS   float64   `json:"warmup_s"`

	// Op is the workload: "subm_conv" (the anchor's), "sparse_conv_k2s2"
	// or "grid_sample". Records without it are "subm_conv".
	Op string `json:"op,omitempty"`
	// FLOPs is the useful floating-point work of one step.
	FLOPs float64 `json:"flops,omitempty"`
	// Iters is K, the steps per timed repeat.
	Iters int `json:"iters,omitempty"`
	// Batch is the number of batch copies of the voxel set.
	Batch int `json:"batch,omitempty"`
	// AllocMBPerStep is the Go heap allocated per step (CPU).
	AllocMBPerStep *float64 `json:"alloc_mb_per_step,omitempty"`
	// Source is "sphere" or the coordinate file the voxels came from.
	Source string `json:"source,omitempty"`
	// WGradDType is the element type of the weight gradients a train
	// step returns (-wgrad): the input's for fp16 and bf16 by default,
	// as FlexGEMM's .grad, else fp32; empty for inference.
	WGradDType string `json:"wgrad_dtype,omitempty"`
	// Backward is the order of a train step's gradients within a layer
	// when it is not the default input-first (-backward): "params-first".
	Backward string `json:"backward,omitempty"`
	// Device describes the processor, e.g. "cpu: AMD EPYC 9654, 2 cores"
	// or "cuda: NVIDIA H200, sm_90, 132 SMs, 140 GiB, driver 13000".
	Device string `json:"device,omitempty"`
	// Kmap says how the kernel map of every step was built: "cpu" (host,
	// CPU engine), "gpu" (on the GPU) or "cpu+upload" (host, tables
	// uploaded to the GPU).
	Kmap string `json:"kmap,omitempty"`
	// PctPeak is TFLOPS as a percentage of the device's dense tensor-core
	// rate (790 TFLOP/s on an H200); absent on the CPU.
	PctPeak *float64 `json:"pct_of_peak,omitempty"`
	// Error is set, instead of the times, when the measurement failed
	// (out of device memory, say).
	Error string `json:"error,omitempty"`
	// Procs is GOMAXPROCS during the run.
	Procs int `json:"gomaxprocs,omitempty"`
	// Commit identifies the code measured (git describe or vcs.revision).
	Commit string `json:"commit,omitempty"`
	// GoVersion is the toolchain that built the bench.
	GoVersion string `json:"go,omitempty"`
	// Time is when the measurement finished (RFC 3339).
	Time string `json:"time,omitempty"`
	// Phases is the per-phase device-time breakdown of a few extra,
	// profiled steps (-phases; GPU only).
	Phases *PhaseSummary `json:"phases,omitempty"`
	// Power is the GPU's energy per step, board power and SM clock over
	// the timed steps (-power; GPU only).
	Power *PowerRecord `json:"power,omitempty"`
}

// OpOrDefault returns r.Op, or "subm_conv" for records (such as
// FlexGEMM's) that do not name one.
func (r Record) OpOrDefault() string {
	if r.Op == "" {
		return opSubm
	}
	return r.Op
}

// writeRecord writes r as one JSON line.
func writeRecord(w io.Writer, r Record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// readRecords reads the JSON-object lines of r; other lines (the summary
// table, FlexGEMM's "device …" line, blanks) are skipped. A line that
// starts with '{' but does not decode, or has no positive time and no
// error, is an error naming the line.
func readRecords(r io.Reader, name string) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(s, "{") {
			continue
		}
		var rec Record
		if err := json.Unmarshal([]byte(s), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if rec.Impl == "" || rec.Mode == "" || rec.DType == "" {
			return nil, fmt.Errorf("%s:%d: record without impl, mode or dtype", name, line)
		}
		if rec.Error == "" && (!(rec.MS > 0) || math.IsInf(rec.MS, 0)) {
			return nil, fmt.Errorf("%s:%d: ms = %v is not a positive time", name, line, rec.MS)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, nil
}

// recordArgs parses a subcommand's flags (fs, named "bench <name>") and
// reads the records of the files named after them (readRecordFiles); no
// file prints fs's usage and is an error "<name>: no input files".
func recordArgs(fs *flag.FlagSet, args []string) ([]Record, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return nil, fmt.Errorf("%s: no input files", strings.TrimPrefix(fs.Name(), "bench "))
	}
	return readRecordFiles(fs.Args())
}

// readRecordFiles reads the records of every named file (readRecords), in
// order.
func readRecordFiles(names []string) ([]Record, error) {
	var out []Record
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		rs, err := readRecords(bytes.NewReader(data), name)
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// round returns x rounded to d decimals.
func round(x float64, d int) float64 {
	p := math.Pow(10, float64(d))
	return math.Round(x*p) / p
}

// writeSummary prints the records as a markdown table, failed ones in a
// list below it.
func writeSummary(w io.Writer, recs []Record) {
	fmt.Fprintln(w, "| op | mode | dtype | algo | kmap | RES,C,L | N | pairs | ms | TFLOP/s | % peak | peak MB | warm-up s |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
	var failed []Record
	for _, r := range recs {
		if r.Error != "" {
			failed = append(failed, r)
			continue
		}
		peak, pct := "n/a", "n/a"
		if r.PeakMemGB != nil {
			peak = fmt.Sprintf("%.1f", *r.PeakMemGB*1024)
		}
		if r.PctPeak != nil {
			pct = fmt.Sprintf("%.1f", *r.PctPeak)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %d,%d,%d | %d | %d | %.4g | %.4g | %s | %s | %.2f |\n",
			r.OpOrDefault(), r.Mode, r.DType, r.Algo, r.Kmap, r.RES, r.C, r.L, r.N, r.Pairs, r.MS, r.TFLOPS, pct, peak, r.WarmupS)
	}
	for _, r := range failed {
		fmt.Fprintf(w, "\nfailed: %s %s %s %s RES,C,L=%d,%d,%d: %s", r.OpOrDefault(), r.Mode, r.DType, r.Algo, r.RES, r.C, r.L, r.Error)
	}
	if len(failed) > 0 {
		fmt.Fprintln(w)
	}
}
