package autotune

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// envChild makes the test binary act as one writer process of
// TestConcurrentProcesses.
const envChild = "FLEXGEMM_AUTOTUNE_TEST_CHILD"

const (
	nProcs          = 4
	entriesPerChild = 25
)

func childKey(child, j int) Key {
	k := testKey()
	k.Ci = 1000*(child+1) + j
	return k
}

// TestConcurrentProcesses starts nProcs copies of the test binary that all
// store entries into one cache file at the same time, then checks that no
// entry was lost and the file is intact.
func TestConcurrentProcesses(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("child process")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "shared", "autotune.json")
	var wg sync.WaitGroup
	outs := make([][]byte, nProcs)
	errs := make([]error, nProcs)
	for p := range nProcs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestWriterChild$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), envChild+"="+strconv.Itoa(p), EnvCache+"="+path)
			outs[p], errs[p] = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	for p := range nProcs {
		require.NoError(t, errs[p], "child %d:\n%s", p, outs[p])
		require.Contains(t, string(outs[p]), "--- PASS: TestWriterChild", "child %d did not run:\n%s", p, outs[p])
	}
	entries := parseFile(t, path)
	require.Len(t, entries, nProcs*entriesPerChild)
	for p := range nProcs {
		for j := range entriesPerChild {
			e, ok := entries[childKey(p, j)]
			require.True(t, ok, "entry %d of child %d lost", j, p)
			require.Equal(t, fmt.Sprintf("child%d_%d", p, j), e.Choice.Algorithm)
		}
	}
	noTempFiles(t, filepath.Dir(path))
	bad, _ := filepath.Glob(path + ".bad-*")
	require.Empty(t, bad, "no writer ever saw a broken file")
}

// TestWriterChild is the body of one writer process; it does nothing in a
// normal test run.
func TestWriterChild(t *testing.T) {
	id := os.Getenv(envChild)
	if id == "" {
		t.Skip("only run as a child of TestConcurrentProcesses")
	}
	p, err := strconv.Atoi(id)
	require.NoError(t, err)
	c, err := Open(WithPretuned(nil), WithWarn(func(err error) { t.Errorf("warning: %v", err) }))
	require.NoError(t, err)
	for j := range entriesPerChild {
		require.NoError(t, c.Store(childKey(p, j), measured(fmt.Sprintf("child%d_%d", p, j), int64(j+1))))
	}
	// Each writer sees at least its own entries.
	for j := range entriesPerChild {
		_, _, ok := c.Lookup(childKey(p, j))
		require.True(t, ok)
	}
}
