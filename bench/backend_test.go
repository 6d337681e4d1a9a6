package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

func TestParseRunFlagsCUDA(t *testing.T) {
	var stderr bytes.Buffer
	// Flags parse in every build; opening the device is what needs the tag.
	o, err := parseRunFlags([]string{"-device", "cuda"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, deviceCUDA, o.device)
	require.Equal(t, 20, o.measure.iters, "the anchor's 20 steps per repeat")
	require.Equal(t, 2, o.measure.warmups)
	require.Equal(t, 3, o.measure.repeats)
	require.Equal(t, []dtypeInfo{{"fp16", sparse.Float32, sparse.Float16, false}}, o.dtypes, "fp16 by default, like the anchor")

	o, err = parseRunFlags([]string{"-device", "cuda", "-dtypes", "tf32,bf16,fp32", "-iters", "5", "-kmap", "cpu", "-gpu", "1", "-peaktflops", "100"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, 5, o.measure.iters, "an explicit -iters wins")
	require.Equal(t, []dtypeInfo{
		{"tf32", sparse.Float32, sparse.Float32, true},
		{"bf16", sparse.Float32, sparse.BFloat16, false},
		{"fp32", sparse.Float32, sparse.Float32, false},
	}, o.dtypes)
	require.Equal(t, kmapCPU, o.kmap)
	require.Equal(t, 1, o.gpu)
	require.Equal(t, 100.0, o.peakTFLOPS)

	_, err = parseRunFlags([]string{"-device", "cuda", "-dtypes", "fp64"}, &stderr)
	require.ErrorContains(t, err, `dtype "fp64" is not available on -device cuda`)
	_, err = parseRunFlags([]string{"-dtypes", "bf16"}, &stderr)
	require.ErrorContains(t, err, "-device cpu")
}

func TestTablesFor(t *testing.T) {
	for _, tc := range []struct {
		algo         sparse.Algorithm
		train, dgrad bool
		want         tableUse
	}{
		{sparse.MaskedImplicitSplitK, false, false, tableUse{masked: true}},
		{sparse.MaskedImplicitSplitK, false, true, tableUse{masked: true}},
		{sparse.MaskedImplicitSplitK, true, false, tableUse{masked: true, pairs: true}},
		{sparse.MaskedImplicitSplitK, true, true, tableUse{masked: true, reverseMasked: true, pairs: true}},
		{sparse.MaskedImplicit, true, true, tableUse{masked: true, reverseMasked: true, pairs: true}},
		{sparse.Implicit, true, true, tableUse{pairs: true}},
		{sparse.ImplicitSplitK, false, true, tableUse{}},
		{sparse.Explicit, true, true, tableUse{}},
	} {
		require.Equal(t, tc.want, tablesFor(tc.algo, tc.train, tc.dgrad), "%v train=%v dgrad=%v", tc.algo, tc.train, tc.dgrad)
	}
}

func TestCountPairs(t *testing.T) {
	for _, res := range []int{2, 8, 16} {
		coords, ext := synth.SphereShell(res, 2)
		m, err := kmap.NewSubmanifold(coords, ext, kernel3, dilation1)
		require.NoError(t, err)
		n, err := countPairs(m)
		require.NoError(t, err)
		require.Equal(t, m.Pairs().Count(), n, "RES %d", res)
		s, err := kmap.NewStrided(coords, ext, down2, nil)
		require.NoError(t, err)
		n, err = countPairs(s)
		require.NoError(t, err)
		require.Equal(t, s.Pairs().Count(), n, "RES %d strided", res)
	}
	n, err := countPairs(&kmap.Map{})
	require.NoError(t, err)
	require.Equal(t, int64(0), n)
}

// fakeTimer returns the given milliseconds per repeat.
type fakeTimer struct {
	ms      []float64
	i       int
	started bool
}

func (f *fakeTimer) start() error { f.started = true; return nil }

func (f *fakeTimer) stop() (float64, error) {
	if !f.started {
		return 0, errors.New("stop before start")
	}
	f.started = false
	f.i++
	return f.ms[f.i-1], nil
}

func (f *fakeTimer) destroy() {}

// TestMeasureDeviceClock checks the device path of measure: the repeat
// times come from the backend's timer, divided by the steps per repeat;
// the memory peak is reset after the warm-ups and read after the repeats.
func TestMeasureDeviceClock(t *testing.T) {
	var log []string
	be := cpuBackend()
	be.sync = func() error { log = append(log, "sync"); return nil }
	timer := &fakeTimer{ms: []float64{30, 10, 20}}
	be.newTimer = func() (repeatTimer, error) { return timer, nil }
	be.resetPeak = func() { log = append(log, "reset") }
	be.peakGB = func() float64 { log = append(log, "peak"); return 1.5 }
	steps := 0
	step := func() error { steps++; log = append(log, "step"); return nil }
	tm, err := measure(step, measureOpts{warmups: 2, repeats: 3, iters: 10, memSample: true}, be)
	require.NoError(t, err)
	require.Equal(t, []float64{3, 1, 2}, tm.msAll)
	require.Equal(t, 2.0, tm.ms)
	require.Equal(t, 10, tm.iters)
	require.Equal(t, 30, tm.stepsRun)
	require.Equal(t, 32, steps)
	require.NotNil(t, tm.peak)
	require.Equal(t, 1.5, *tm.peak, "the device peak, not the Go heap")
	require.Equal(t, []string{"step", "step", "sync", "reset"}, log[:4])
	require.Equal(t, "peak", log[len(log)-1])

	// A failing step is reported with its repeat and step.
	be.newTimer = func() (repeatTimer, error) { return &fakeTimer{ms: []float64{1, 1, 1}}, nil }
	n := 0
	_, err = measure(func() error {
		if n++; n == 5 {
			return errors.New("boom")
		}
		return nil
	}, measureOpts{warmups: 1, repeats: 2, iters: 3}, be)
	require.ErrorContains(t, err, "repeat 1 step 0: boom")
	_, err = measure(func() error { return errors.New("no") }, measureOpts{warmups: 1, repeats: 1, iters: 1}, be)
	require.ErrorContains(t, err, "warm-up 0: no")
}

// errOOM stands for the engine's out-of-memory error.
var errOOM = errors.New("out of device memory")

// fakeDevice registers a device named "fake" for the duration of the
// test: the CPU engine with an allocator that fails matrices above
// maxRows rows, counting recoveries.
func fakeDevice(t *testing.T, maxRows int, recoveries *int) {
	t.Helper()
	deviceDTypes["fake"] = deviceDTypes[deviceCPU]
	openers["fake"] = func(*runOptions) (*backend, error) {
		be := cpuBackend()
		be.name, be.device, be.peakTFLOPS = "fake", "fake: test device", 10
		fill := be.fill
		be.fill = func(dt dtypeInfo, rows, cols int, v float64) (sparse.Matrix, error) {
			if rows > maxRows {
				return sparse.Matrix{}, fmt.Errorf("%w: [%d, %d]", errOOM, rows, cols)
			}
			return fill(dt, rows, cols, v)
		}
		be.peakGB = func() float64 { return 0.25 }
		be.resetPeak = func() {}
		be.afterFailure = func() { *recoveries++ }
		return be, nil
	}
	t.Cleanup(func() {
		delete(deviceDTypes, "fake")
		delete(openers, "fake")
	})
}

// TestRunBenchFailureRecords checks that a configuration that fails (out
// of memory) becomes JSON records with an error field, that the others
// are still measured, and that compare skips the failures.
func TestRunBenchFailureRecords(t *testing.T) {
	if !hostEngine() {
		t.Skip("no engine for host data is registered in this build")
	}
	recoveries := 0
	fakeDevice(t, 500, &recoveries) // RES 8 has 192 voxels, RES 16 has 848
	dir := t.TempDir()
	out := filepath.Join(dir, "r.jsonl")
	var stdout, stderr bytes.Buffer
	code := runMain([]string{"-device", "fake", "-cfgs", "8,4,2;16,4,2", "-iters", "1", "-repeats", "1", "-warmup", "0",
		"-o", out, "-commit", "c1"}, &stdout, &stderr)
	require.Equal(t, 1, code, "failures make the exit status 1")
	// RES 16 training fails (its all-ones output gradient, made in the
	// step, does not fit); RES 16 inference needs no such matrix.
	require.Contains(t, stderr.String(), "1 of 4 measurements failed")
	require.Equal(t, 1, recoveries)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	recs, err := readRecords(bytes.NewReader(data), out)
	require.NoError(t, err)
	require.Len(t, recs, 4)
	for i, r := range recs {
		require.Equal(t, []string{"train", "infer"}[i%2], r.Mode)
		require.Equal(t, "fake: test device", r.Device)
		require.Equal(t, "c1", r.Commit)
		require.Equal(t, kmapUpload, r.Kmap, "host maps on a device that is not the CPU")
		if i != 2 {
			require.Equal(t, []int{8, 8, 0, 16}[i], r.RES)
			require.Empty(t, r.Error)
			require.Greater(t, r.MS, 0.0)
			require.Equal(t, 0.25, *r.PeakMemGB)
			require.NotNil(t, r.PctPeak)
			require.InDelta(t, 100*r.TFLOPS/10, *r.PctPeak, 0.01)
			continue
		}
		require.Equal(t, 16, r.RES)
		require.Contains(t, r.Error, "out of device memory: [848, 4]")
		require.Equal(t, 0.0, r.MS)
		require.Nil(t, r.PeakMemGB)
		require.Nil(t, r.PctPeak)
		require.Equal(t, "fp32", r.DType)
		require.Equal(t, 4, r.C)
		require.Equal(t, 2, r.L)
	}
	require.Contains(t, stdout.String(), "failed: subm_conv train fp32 auto RES,C,L=16,4,2: repeat 0 step 0: output gradient: out of device memory: [848, 4]")
	require.Equal(t, 1, strings.Count(stdout.String(), "| subm_conv | train |"), "the summary lists measured records only")

	// compare skips the failed records and names them.
	base := filepath.Join(dir, "base.jsonl")
	var b bytes.Buffer
	for _, r := range recs {
		r.Impl, r.MS, r.Error = "flexgemm", 2, ""
		require.NoError(t, writeRecord(&b, r))
	}
	require.NoError(t, os.WriteFile(base, b.Bytes(), 0o644))
	stdout.Reset()
	stderr.Reset()
	require.Equal(t, 0, runMain([]string{"compare", out, base}, &stdout, &stderr), stderr.String())
	require.Equal(t, 3, strings.Count(stdout.String(), "| flexgemm-go |"))
	require.Contains(t, stderr.String(), "compare: failed flexgemm-go subm_conv train fp32 auto 16,4,2: repeat 0 step 0: output gradient: out of device memory")
}

func TestReadErrorRecord(t *testing.T) {
	line := `{"impl":"flexgemm-go","algo":"auto","mode":"train","dtype":"fp16","RES":1024,"C":64,"L":2,"N":0,"pairs":0,"ms":0,"tflops":0,"peak_mem_gb":null,"warmup_s":0,"error":"cudaext: out of device memory"}`
	recs, err := readRecords(strings.NewReader(line+"\n"), "x")
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, "cudaext: out of device memory", recs[0].Error)
	// Without an error a zero time is still rejected.
	_, err = readRecords(strings.NewReader(strings.Replace(line, `,"error":"cudaext: out of device memory"`, "", 1)+"\n"), "x")
	require.ErrorContains(t, err, "x:1")
}

func TestOpenBackend(t *testing.T) {
	o := &runOptions{device: deviceCPU, kmap: kmapAuto}
	be, err := openBackend(o)
	require.NoError(t, err)
	require.Equal(t, kmapCPU, o.kmap)
	require.Equal(t, kmapCPU, be.kmapLabel)
	be.close()
	_, err = openBackend(&runOptions{device: deviceCPU, kmap: kmapGPU})
	require.ErrorContains(t, err, "-kmap gpu is not available on -device cpu")
	_, err = openBackend(&runOptions{device: "tpu", kmap: kmapAuto})
	require.ErrorContains(t, err, `unknown -device "tpu"`)
}

func TestSafely(t *testing.T) {
	require.NoError(t, safely(func() error { return nil }))
	require.EqualError(t, safely(func() error { return errOOM }), errOOM.Error())
	require.EqualError(t, safely(func() error { panic("index out of range") }), "panic: index out of range")
}
