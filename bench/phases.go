package main

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
)

// Phase breakdown (-phases): after a configuration is timed, a few more
// steps run with the device engine's profiler on. Every kernel launch is
// then bracketed by CUDA events and the step code marks its phases (map
// build, derived tables, each layer's forward, weight gradient, bias
// gradient and input gradient), so each phase reports its device span, the
// summed time of its kernels and the difference: device time spent on
// anything but kernels (idle while the host prepares or waits, copies,
// memsets). Where the backend measures its memory peak (the CUDA engine),
// each phase also reports the largest memory in use during it (PeakMB):
// the backend's peak is reset at every mark of a profiled step, after the
// timed steps have reported theirs. The profiled steps run a little slower
// than timed ones (two events per launch); the record's ms stays the timed
// number.

// phasef is phase with a formatted name, formatted only while a profile
// runs.
func (be *backend) phasef(format string, args ...any) {
	if be.prof == nil || !be.prof.on {
		return
	}
	be.phase(fmt.Sprintf(format, args...))
}

// phaseTime is one phase of one profiled step, as the backend reports it.
type phaseTime struct {
	name     string
	spanMs   float64
	kernelMs float64
	hostMs   float64
	kernels  map[string]kernelTime
}

type kernelTime struct {
	launches int
	ms       float64
}

// stepProfiler is a backend's phase profiler (nil where there is none).
type stepProfiler struct {
	// start begins a profile whose first phase is first.
	start func(first string) error
	// mark begins a new phase.
	mark func(name string) error
	// stop ends the profile and returns its phases.
	stop func() ([]phaseTime, error)
	on   bool
	err  error // first failed mark
	// peaks holds, while a step is profiled on a backend that measures
	// its memory peak, the peak in GiB of each phase that has ended, in
	// phase order (the backend's peak is reset at every mark).
	peaks []float64
	// noPeaks skips the peaks (chained profiles).
	noPeaks bool
}

// phase marks the start of a phase of the running step profile; a no-op
// unless a profile runs (so timed steps pay nothing).
func (be *backend) phase(name string) {
	p := be.prof
	if p == nil || !p.on {
		return
	}
	be.endPhasePeak()
	if err := p.mark(name); err != nil && p.err == nil {
		p.err = err
	}
}

// endPhasePeak records the memory peak of the phase that ends now and
// resets the backend's peak for the next one (where it measures one).
func (be *backend) endPhasePeak() {
	if be.peakGB == nil || be.prof.noPeaks {
		return
	}
	be.prof.peaks = append(be.prof.peaks, be.peakGB())
	be.resetPeak()
}

// PhaseRecord is one phase of Record.Phases: per-step averages over the
// profiled steps.
type PhaseRecord struct {
	Phase    string  `json:"phase"`
	SpanMs   float64 `json:"span_ms"`
	KernelMs float64 `json:"kernel_ms"`
	GapMs    float64 `json:"gap_ms"`
	HostMs   float64 `json:"host_ms"`
	Launches int     `json:"launches"`
	// PeakMB is the largest device memory in use during the phase (MiB,
	// the highest of the profiled steps), where the backend measures its
	// memory peak (the record's peak_mem_gb is the whole step's).
	PeakMB *float64 `json:"peak_mb,omitempty"`
	// Top lists the phase's slowest kernels, "name ms×launches", slowest
	// first (at most 3).
	Top []string `json:"top,omitempty"`
}

// PhaseSummary is the per-step profile of a record (-phases).
type PhaseSummary struct {
	Steps int `json:"steps"`
	// Chained: the steps ran back to back in one profile (-phaseschain),
	// so their gaps are those of timed steps, not of steps started on an
	// idle device.
	Chained  bool    `json:"chained,omitempty"`
	StepMs   float64 `json:"step_ms"`   // device span of a profiled step
	KernelMs float64 `json:"kernel_ms"` // summed kernel time of a step
	GapMs    float64 `json:"gap_ms"`    // StepMs − KernelMs
	// ByKind is kernel ms per step by kind: gemm_fwd (gather kernels in
	// forward phases), gemm_dgrad, gemm_wgrad (pairs kernels), reduce
	// (split-K reductions), transpose (weight transposes of dgrad),
	// bias, kmap (map building and derived tables), other.
	ByKind map[string]float64 `json:"by_kind"`
	Phases []PhaseRecord      `json:"phases"`
}

// kernelKind classifies a kernel for PhaseSummary.ByKind by its name and
// the phase it ran in.
func kernelKind(phase, name string) string {
	switch {
	case strings.HasPrefix(name, "spconv_reduce_"):
		return "reduce"
	case strings.HasPrefix(name, "spconv_transpose_w"):
		return "transpose"
	case strings.HasPrefix(name, "spconv_bias_grad"):
		return "bias"
	case strings.HasPrefix(name, "spconv_pairs_"):
		return "gemm_wgrad"
	case strings.HasPrefix(name, "spconv_gather_") && strings.HasPrefix(phase, "dgrad"):
		return "gemm_dgrad"
	case strings.HasPrefix(name, "spconv_gather_"):
		return "gemm_fwd"
	case strings.HasPrefix(name, "spconv_im2col"):
		return "im2col"
	case phase == "map" || phase == "derive":
		return "kmap"
	}
	return "other"
}

// profileSteps runs n steps under the backend's profiler and returns the
// per-step averages. The backend must have a profiler. Each step is its
// own profile, which waits for the device when it ends, so every step
// starts on an idle device and its first launches are exposed; with chain
// the n steps run back to back in one profile, as timed steps do (the
// host runs ahead of the device and only what waits for the device shows
// as gaps), and the phases' memory peaks are not taken (their readings
// are host round trips of their own).
func profileSteps(step func() error, be *backend, n int, chain bool) (*PhaseSummary, error) {
	p := be.prof
	if p == nil {
		return nil, fmt.Errorf("-phases: device %s has no profiler", be.name)
	}
	if err := be.sync(); err != nil {
		return nil, err
	}
	type acc struct {
		PhaseRecord
		kernels map[string]kernelTime
	}
	var order []string
	byName := map[string]*acc{}
	sum := &PhaseSummary{Steps: n, Chained: chain, ByKind: map[string]float64{}}
	peaks := be.peakGB != nil && !chain
	add := func(phases []phaseTime) {
		for j, ph := range phases {
			a := byName[ph.name]
			if a == nil {
				a = &acc{PhaseRecord: PhaseRecord{Phase: ph.name}, kernels: map[string]kernelTime{}}
				byName[ph.name] = a
				order = append(order, ph.name)
			}
			if peaks {
				mb := round(p.peaks[j]*1024, 1)
				if a.PeakMB == nil || mb > *a.PeakMB {
					a.PeakMB = &mb
				}
			}
			a.SpanMs += ph.spanMs
			a.KernelMs += ph.kernelMs
			a.HostMs += ph.hostMs
			for k, t := range ph.kernels {
				c := a.kernels[k]
				c.launches += t.launches
				c.ms += t.ms
				a.kernels[k] = c
				a.Launches += t.launches
				sum.ByKind[kernelKind(ph.name, k)] += t.ms
			}
			sum.StepMs += ph.spanMs
			sum.KernelMs += ph.kernelMs
		}
	}
	// run profiles steps (n of them, or one per call) from start to stop.
	run := func(steps int, what string) error {
		p.err = nil
		p.peaks = p.peaks[:0]
		p.noPeaks = !peaks
		if peaks {
			be.resetPeak()
		}
		if err := p.start("step"); err != nil {
			return err
		}
		p.on = true
		var err error
		for i := range steps {
			if i > 0 {
				be.phase("step")
			}
			if err = step(); err != nil {
				break
			}
		}
		p.on = false
		if peaks {
			be.endPhasePeak()
		}
		phases, serr := p.stop()
		if err != nil {
			return fmt.Errorf("profiled %s: %w", what, err)
		}
		if serr != nil {
			return serr
		}
		if p.err != nil {
			return p.err
		}
		if peaks && len(p.peaks) != len(phases) {
			return fmt.Errorf("profiled %s: %d memory peaks for %d phases", what, len(p.peaks), len(phases))
		}
		add(phases)
		return nil
	}
	if chain {
		if err := run(n, fmt.Sprintf("steps (%d, chained)", n)); err != nil {
			return nil, err
		}
	} else {
		for i := range n {
			if err := run(1, fmt.Sprintf("step %d", i)); err != nil {
				return nil, err
			}
		}
	}
	f := 1 / float64(n)
	for _, name := range order {
		a := byName[name]
		r := a.PhaseRecord
		r.SpanMs, r.KernelMs, r.HostMs = round(r.SpanMs*f, 4), round(r.KernelMs*f, 4), round(r.HostMs*f, 4)
		r.GapMs = round(r.SpanMs-r.KernelMs, 4)
		r.Launches = (r.Launches + n - 1) / n
		names := make([]string, 0, len(a.kernels))
		for k := range a.kernels {
			names = append(names, k)
		}
		sort.Slice(names, func(i, j int) bool {
			if a.kernels[names[i]].ms != a.kernels[names[j]].ms {
				return a.kernels[names[i]].ms > a.kernels[names[j]].ms
			}
			return names[i] < names[j]
		})
		for _, k := range names[:min(3, len(names))] {
			t := a.kernels[k]
			r.Top = append(r.Top, fmt.Sprintf("%s %.4g×%d", k, t.ms*f, (t.launches+n-1)/n))
		}
		sum.Phases = append(sum.Phases, r)
	}
	sum.StepMs, sum.KernelMs = round(sum.StepMs*f, 4), round(sum.KernelMs*f, 4)
	sum.GapMs = round(sum.StepMs-sum.KernelMs, 4)
	for k, v := range sum.ByKind {
		sum.ByKind[k] = round(v*f, 4)
	}
	return sum, nil
}

// phaseGroup sums the spans of the phases whose name starts with prefix.
func (s *PhaseSummary) phaseGroup(prefix string) float64 {
	var t float64
	for _, p := range s.Phases {
		if p.Phase == prefix || strings.HasPrefix(p.Phase, prefix+" ") {
			t += p.SpanMs
		}
	}
	return t
}

// writePhaseSummary prints one line per profiled record: the timed ms, the
// profiled step's device span, kernel time and the rest, and the spans of
// the phase groups and the kernel kinds.
func writePhaseSummary(w io.Writer, recs []Record) {
	found := false
	for _, r := range recs {
		found = found || r.Phases != nil
	}
	if !found {
		return
	}
	fmt.Fprintln(w, "\nphase breakdown, ms per step (profiled steps; span = device time of the phase incl. idle; gap = span − kernels):")
	fmt.Fprintln(w, "| mode | dtype | RES,C,L | timed | prof.span | kernels | gap | map | derive | fwd | wgrad | bias | dgrad | gemm fwd | gemm wgrad | gemm dgrad | reduce | transpose |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range recs {
		s := r.Phases
		if s == nil {
			continue
		}
		k := s.ByKind
		fmt.Fprintf(w, "| %s | %s | %d,%d,%d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
			r.Mode, r.DType, r.RES, r.C, r.L, r.MS, s.StepMs, s.KernelMs, s.GapMs,
			s.phaseGroup("map"), s.phaseGroup("derive"), s.phaseGroup("fwd"), s.phaseGroup("wgrad"), s.phaseGroup("bias"), s.phaseGroup("dgrad"),
			k["gemm_fwd"], k["gemm_wgrad"], k["gemm_dgrad"], k["reduce"], k["transpose"])
	}
}

// phaseNames returns the phase names of s in order (for tests).
func (s *PhaseSummary) phaseNames() []string {
	var out []string
	for _, p := range s.Phases {
		if !slices.Contains(out, p.Phase) {
			out = append(out, p.Phase)
		}
	}
	return out
}
