//go:build cudaext

package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/cudaext"
)

// TestCUDADevice runs -device cuda: on a machine without a GPU it must
// fail cleanly (exit status 1, the engine's ErrNoDevice message, nothing
// written); on a GPU it measures small configurations of every dtype with
// both map builders and checks the records.
func TestCUDADevice(t *testing.T) {
	_, openErr := cudaext.Open(0)
	out := filepath.Join(t.TempDir(), "r.jsonl")
	var stdout, stderr bytes.Buffer
	if errors.Is(openErr, cudaext.ErrNoDevice) {
		code := runMain([]string{"-device", "cuda", "-cfgs", "8,16,2", "-o", out}, &stdout, &stderr)
		require.Equal(t, 1, code)
		require.Contains(t, stderr.String(), "bench: -device cuda: cudaext: no CUDA device")
		require.Empty(t, stdout.String())
		require.NoFileExists(t, out, "nothing is written when the device does not open")
		return
	}
	require.NoError(t, openErr)
	for _, tc := range []struct{ kmapFlag, label string }{{"gpu", kmapGPU}, {"cpu", kmapUpload}} {
		stdout.Reset()
		code := runMain([]string{"-device", "cuda", "-kmap", tc.kmapFlag, "-cfgs", "8,16,2;16,32,3",
			"-op", "subm_conv,sparse_conv_k2s2", "-dtypes", "fp16,bf16,tf32,fp32", "-algo", "auto,implicit_gemm,explicit_gemm",
			"-iters", "2", "-warmup", "1", "-o", out}, &stdout, &stderr)
		require.Equal(t, 0, code, stderr.String())
		recs, err := readRecords(bytes.NewReader(stdout.Bytes()), "stdout")
		require.NoError(t, err)
		require.Len(t, recs, 2*2*4*3*2)
		for _, r := range recs {
			require.Empty(t, r.Error)
			require.True(t, strings.HasPrefix(r.Device, "cuda: "), r.Device)
			require.Equal(t, tc.label, r.Kmap)
			require.Greater(t, r.MS, 0.0)
			require.Len(t, r.MSAll, 3)
			require.Equal(t, 2, r.Iters)
			require.NotNil(t, r.PeakMemGB)
			require.Greater(t, *r.PeakMemGB, 0.0)
			require.Equal(t, strings.Contains(r.Device, "H200"), r.PctPeak != nil)
			if r.Op == opSubm {
				require.Equal(t, map[int]int{8: 192, 16: 848}[r.RES], r.N)
			}
		}
	}
}
