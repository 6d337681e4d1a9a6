//go:build !cudaext

package main

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCUDAWithoutTag checks that a bench built without the tag says how
// to build one that has the CUDA engine, and writes nothing.
func TestCUDAWithoutTag(t *testing.T) {
	out := filepath.Join(t.TempDir(), "r.jsonl")
	var stdout, stderr bytes.Buffer
	code := runMain([]string{"-device", "cuda", "-o", out}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "built without the CUDA engine")
	require.Contains(t, stderr.String(), "-tags cudaext")
	require.Empty(t, stdout.String())
	require.NoFileExists(t, out)
}
