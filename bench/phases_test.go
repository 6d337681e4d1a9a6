package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// fakeProfiler records the phase marks of a step and reports each phase
// with a span of 1 ms and one kernel per phase named after it.
func fakeProfiler(kernel func(phase string) string) *stepProfiler {
	var names []string
	p := &stepProfiler{}
	p.start = func(first string) error { names = []string{first}; return nil }
	p.mark = func(name string) error { names = append(names, name); return nil }
	p.stop = func() ([]phaseTime, error) {
		out := make([]phaseTime, len(names))
		for i, n := range names {
			out[i] = phaseTime{name: n, spanMs: 1, kernelMs: 0.25, hostMs: 0.5,
				kernels: map[string]kernelTime{kernel(n): {launches: 2, ms: 0.25}}}
		}
		return out, nil
	}
	return p
}

func TestProfileStepsPhases(t *testing.T) {
	be := cpuBackend()
	kernelOf := func(phase string) string {
		switch {
		case strings.HasPrefix(phase, "fwd"):
			return "spconv_gather_f16_x"
		case strings.HasPrefix(phase, "dgrad"):
			return "spconv_gather_f16_x"
		case strings.HasPrefix(phase, "wgrad"):
			return "spconv_pairs_f16_x"
		case phase == "ones":
			return "fill_f16"
		case phase == "map":
			return "kmap_nbr_fine"
		}
		return "spconv_reduce_f16"
	}
	be.prof = fakeProfiler(kernelOf)
	coords, ext := synth.SphereShell(8, 1)
	sc := scene{coords: coords, ext: ext, res: 8, source: "sphere"}
	dt := deviceDTypes[deviceCPU]["fp32"]
	w, err := newWorkload(sc, params{op: opSubm, C: 4, L: 2, dtype: dt, conv: sparse.ConvOptions{Algorithm: sparse.Implicit}, seed: 1, be: be})
	require.NoError(t, err)
	defer w.close()

	s, err := profileSteps(w.steps["train"], be, 2, false)
	require.NoError(t, err)
	require.False(t, be.prof.on, "the profile ends with the steps")
	require.Equal(t, []string{"step", "map", "derive", "fwd L0", "fwd L1", "ones", "dgrad L1", "wgrad L1", "wgrad L0", "release"}, s.phaseNames(),
		"the input gradient before the parameter gradients, as FlexGEMM's backward")
	require.Equal(t, 2, s.Steps)
	require.InDelta(t, 10.0, s.StepMs, 1e-9, "10 phases of 1 ms per step")
	require.InDelta(t, 10*0.25, s.KernelMs, 1e-9)
	require.InDelta(t, s.StepMs-s.KernelMs, s.GapMs, 1e-9)
	for _, p := range s.Phases {
		require.InDelta(t, 1.0, p.SpanMs, 1e-9, p.Phase)
		require.InDelta(t, 0.75, p.GapMs, 1e-9, p.Phase)
		require.InDelta(t, 0.5, p.HostMs, 1e-9, p.Phase)
		require.Equal(t, 2, p.Launches, p.Phase)
		require.Len(t, p.Top, 1)
		require.True(t, strings.HasPrefix(p.Top[0], kernelOf(p.Phase)+" 0.25×2"), p.Top[0])
	}
	require.InDelta(t, 0.5, s.ByKind["gemm_fwd"], 1e-9)
	require.InDelta(t, 0.25, s.ByKind["gemm_dgrad"], 1e-9)
	require.InDelta(t, 0.5, s.ByKind["gemm_wgrad"], 1e-9)
	require.Zero(t, s.ByKind["bias"], "the bias gradients are in the wgrad phases (sparse.ConvParamGrads)")
	require.InDelta(t, 0.25, s.ByKind["kmap"], 1e-9)
	require.InDelta(t, 3*0.25, s.ByKind["reduce"], 1e-9, "step, derive, release")
	require.InDelta(t, 0.25, s.ByKind["other"], 1e-9, "ones")
	require.InDelta(t, 2.0, s.phaseGroup("fwd"), 1e-9)
	require.InDelta(t, 1.0, s.phaseGroup("dgrad"), 1e-9)

	// Inference has no backward phases; timed steps (no profile) mark
	// nothing.
	s, err = profileSteps(w.steps["infer"], be, 1, false)
	require.NoError(t, err)
	require.Equal(t, []string{"step", "map", "derive", "fwd L0", "fwd L1", "release"}, s.phaseNames())
	require.NoError(t, w.steps["train"]())

	var buf bytes.Buffer
	writePhaseSummary(&buf, []Record{{Mode: "infer", DType: "fp32", RES: 8, C: 4, L: 2, MS: 1.5, Phases: s}, {Mode: "train"}})
	out := buf.String()
	require.Contains(t, out, "phase breakdown")
	require.Contains(t, out, "| infer | fp32 | 8,4,2 | 1.500 | 6.000 | 1.500 | 4.500 | 1.000 | 1.000 | 2.000 |")
	require.Equal(t, 4, strings.Count(out, "\n")-1, "heading, header, rule and one row")
	buf.Reset()
	writePhaseSummary(&buf, []Record{{Mode: "train"}})
	require.Empty(t, buf.String(), "no table without profiled records")
}

// TestProfileStepsMemory: on a backend that measures its memory peak,
// every phase gets the peak of its own span (the peak is reset at each
// mark), the highest over the profiled steps.
func TestProfileStepsMemory(t *testing.T) {
	be := cpuBackend()
	be.prof = fakeProfiler(func(string) string { return "k" })
	var inUse, peak float64 // GiB
	be.resetPeak = func() { peak = inUse }
	be.peakGB = func() float64 { return peak }
	use := func(gb float64) { inUse += gb; peak = max(peak, inUse) }
	step := 0
	s, err := profileSteps(func() error {
		step++
		use(1) // in "step"
		be.phase("a")
		use(0.5)
		use(-0.5)
		be.phase("b")
		use(float64(step) / 4) // the second step peaks higher
		use(-1 - float64(step)/4)
		return nil
	}, be, 2, false)
	require.NoError(t, err)
	require.Equal(t, []string{"step", "a", "b"}, s.phaseNames())
	want := []float64{1024, 1536, 1024 + 512}
	for i, p := range s.Phases {
		require.NotNil(t, p.PeakMB, p.Phase)
		require.InDelta(t, want[i], *p.PeakMB, 1e-9, p.Phase)
	}
	be.peakGB = nil
	s, err = profileSteps(func() error { be.phase("a"); return nil }, be, 1, false)
	require.NoError(t, err)
	require.Nil(t, s.Phases[0].PeakMB, "no peak without a measuring backend")
	be.peakGB = func() float64 { return peak }
	resets := 0
	be.resetPeak = func() { resets++ }
	s, err = profileSteps(func() error { be.phase("a"); return nil }, be, 2, true)
	require.NoError(t, err)
	require.Equal(t, []string{"step", "a"}, s.phaseNames())
	require.Nil(t, s.Phases[0].PeakMB, "a chained profile takes no peaks")
	require.Zero(t, resets)
}

func TestProfileStepsErrors(t *testing.T) {
	be := cpuBackend()
	_, err := profileSteps(func() error { return nil }, be, 1, false)
	require.ErrorContains(t, err, "has no profiler")

	be.prof = fakeProfiler(func(string) string { return "k" })
	boom := errors.New("boom")
	for _, chain := range []bool{false, true} {
		_, err = profileSteps(func() error { return boom }, be, 2, chain)
		require.ErrorIs(t, err, boom)
		require.False(t, be.prof.on)
	}

	be.prof.mark = func(string) error { return boom }
	_, err = profileSteps(func() error { be.phase("x"); return nil }, be, 1, false)
	require.ErrorIs(t, err, boom, "a failed mark fails the profile")

	_, err = parseRunFlags([]string{"-phases"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-phases needs -device cuda")
	_, err = parseRunFlags([]string{"-phases", "-phasesteps", "0", "-device", "cuda"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-phasesteps 0 must be positive")
	o, err := parseRunFlags([]string{"-phases", "-device", "cuda"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 3, o.phases)
	require.False(t, o.phasesChain)
	_, err = parseRunFlags([]string{"-phaseschain", "-device", "cuda"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "-phaseschain needs -phases")
	o, err = parseRunFlags([]string{"-phases", "-phaseschain", "-phasesteps", "10", "-device", "cuda"}, &bytes.Buffer{})
	require.NoError(t, err)
	require.Equal(t, 10, o.phases)
	require.True(t, o.phasesChain)
}

// TestProfileStepsChained: chained steps run in one profile (one start,
// a "step" mark between steps) and average to the same per-step phases as
// steps profiled one by one.
func TestProfileStepsChained(t *testing.T) {
	be := cpuBackend()
	be.prof = fakeProfiler(func(string) string { return "k" })
	starts := 0
	start := be.prof.start
	be.prof.start = func(first string) error { starts++; return start(first) }
	step := func() error { be.phase("map"); be.phase("fwd L0"); return nil }
	one, err := profileSteps(step, be, 3, false)
	require.NoError(t, err)
	require.Equal(t, 3, starts)
	starts = 0
	chained, err := profileSteps(step, be, 3, true)
	require.NoError(t, err)
	require.Equal(t, 1, starts, "one profile for all the steps")
	require.True(t, chained.Chained)
	require.False(t, one.Chained)
	chained.Chained = false
	require.Equal(t, one, chained)
}
