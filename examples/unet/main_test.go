package main

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/examples/unet/internal/safetensors"
	"github.com/flexgemm-go/flexgemm/ops/device"
)

// heldOut extracts the held-out accuracy and mIoU from the report.
func heldOut(t *testing.T, out string) (acc, miou float64) {
	t.Helper()
	m := regexp.MustCompile(`held-out: loss [0-9.]+, voxel accuracy ([0-9.]+)% .*mIoU ([0-9.]+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "report:\n%s", out)
	acc, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	miou, err = strconv.ParseFloat(m[2], 64)
	require.NoError(t, err)
	return acc, miou
}

// epochLosses extracts the per-epoch training losses (-no-progress lines).
func epochLosses(t *testing.T, out string) []float64 {
	t.Helper()
	var ls []float64
	for _, m := range regexp.MustCompile(`epoch \d+/\d+ +step \d+/\d+ +loss ([0-9.]+)`).FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		ls = append(ls, v)
	}
	return ls
}

// TestQuickRun trains the -quick configuration end to end, then restarts
// from its checkpoint: the evaluation must be the same, a corrupt or
// mismatched checkpoint must be a clear error.
func TestQuickRun(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	require.NoError(t, run([]string{"-quick", "-no-progress", "-out", dir}, &out, &errOut), errOut.String())
	report := out.String()
	losses := epochLosses(t, report)
	require.Len(t, losses, 4, report)
	require.Less(t, losses[len(losses)-1], losses[0], "training loss decreases:\n%s", report)
	acc, miou := heldOut(t, report)
	require.Contains(t, report, "wall time")

	ck := filepath.Join(dir, "unet.safetensors")
	f, err := safetensors.Load(ck)
	require.NoError(t, err)
	require.Equal(t, "12", f.Metadata["steps"])
	pic, err := os.Open(filepath.Join(dir, "predictions.png"))
	require.NoError(t, err)
	cfg, err := png.DecodeConfig(pic)
	pic.Close()
	require.NoError(t, err)
	require.Greater(t, cfg.Width, 300)

	// Restart: evaluate the checkpoint only.
	out.Reset()
	require.NoError(t, run([]string{"-quick", "-no-progress", "-out", dir, "-load", ck, "-epochs", "0", "-save", ""}, &out, &errOut), errOut.String())
	require.Contains(t, out.String(), "trained 12 steps before")
	acc2, miou2 := heldOut(t, out.String())
	require.Equal(t, acc, acc2, "weights survive a restart")
	require.Equal(t, miou, miou2)

	// Resume training for one more epoch; the step count carries on.
	out.Reset()
	ck2 := filepath.Join(dir, "resumed.safetensors")
	require.NoError(t, run([]string{"-quick", "-no-progress", "-out", dir, "-load", ck, "-epochs", "1", "-save", ck2, "-png", ""}, &out, &errOut), errOut.String())
	f2, err := safetensors.Load(ck2)
	require.NoError(t, err)
	require.Equal(t, "15", f2.Metadata["steps"])

	// A different architecture is refused, naming the flag.
	err = run([]string{"-quick", "-out", dir, "-load", ck, "-channels", "6", "-epochs", "0"}, &out, &errOut)
	require.ErrorContains(t, err, "channels=4, the model has channels=6 (set -channels)")

	// A corrupt file is refused.
	b, err := os.ReadFile(ck)
	require.NoError(t, err)
	bad := filepath.Join(dir, "bad.safetensors")
	b[9] = '['
	require.NoError(t, os.WriteFile(bad, b, 0o644))
	err = run([]string{"-quick", "-out", dir, "-load", bad, "-epochs", "0"}, &out, &errOut)
	require.ErrorIs(t, err, safetensors.ErrFormat)
}

func TestFlagErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, args := range [][]string{
		{"-algo", "fastest"},
		{"-epochs", "-1"},
		{"-batch", "0"},
		{"-grid", "30", "-levels", "3"},
		{"-levels", "0"},
		{"stray"},
		{"-nosuchflag"},
	} {
		require.Error(t, run(append(args, "-out", t.TempDir()), &out, &errOut), "%v", args)
	}
}

// TestDeviceFlags runs the -quick configuration on the fake device (the
// device code path, emulated on the CPU): float32 gives the host's loss
// curve and metrics; bf16 and fp16 train within mixed-precision noise of
// it. -device cuda without a GPU build or GPU, and bad -device or
// -precision values, are clear errors.
func TestDeviceFlags(t *testing.T) {
	dir := t.TempDir()
	quick := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append([]string{"-quick", "-no-progress", "-out", dir, "-png", "", "-save", "", "-log-every", "3"}, args...)
		require.NoError(t, run(args, &out, &errOut), errOut.String())
		return out.String()
	}
	stepLosses := func(out string) []float64 {
		var ls []float64
		for _, m := range regexp.MustCompile(`(?m)^step \d+ loss ([0-9.]+)$`).FindAllStringSubmatch(out, -1) {
			v, err := strconv.ParseFloat(m[1], 64)
			require.NoError(t, err)
			ls = append(ls, v)
		}
		return ls
	}
	host := quick()
	want := stepLosses(host)
	require.Len(t, want, 5, host) // steps 1, 3, 6, 9, 12
	acc, miou := heldOut(t, host)
	for _, tc := range []struct {
		precision string
		tol       float64
	}{{"fp32", 1e-5}, {"bf16", 5e-2}, {"fp16", 2e-2}} {
		out := quick("-device", "fake", "-precision", tc.precision, "-profile-steps", "1")
		got := stepLosses(out)
		require.Len(t, got, len(want), out)
		for i := range want {
			require.InDelta(t, want[i], got[i], tc.tol*want[i], "%s, logged loss %d:\n%s", tc.precision, i, out)
		}
		require.Contains(t, out, "copied per step:")
		require.Contains(t, out, "wall-clock profile, waiting for the device around every op (1 steps, per step): conv")
		if tc.precision == "fp32" {
			acc2, miou2 := heldOut(t, out)
			require.Equal(t, acc, acc2)
			require.Equal(t, miou, miou2)
		}
	}
	var out, errOut bytes.Buffer
	err := run([]string{"-quick", "-out", dir, "-device", "cuda"}, &out, &errOut)
	require.ErrorIs(t, err, device.ErrNoGPU)
	for _, args := range [][]string{
		{"-device", "tpu"},
		{"-precision", "fp8"},
		{"-precision", "bf16"}, // the CPU computes in fp32
		{"-device", "fake", "-f64"},
		{"-log-every", "-1"},
	} {
		require.Error(t, run(append([]string{"-quick", "-out", dir}, args...), &out, &errOut), "%v", args)
	}
}
