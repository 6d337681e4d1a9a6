package autotune

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
)

// warnings collects the warnings of a cache.
type warnings struct {
	mu   sync.Mutex
	errs []error
}

func (w *warnings) add(err error) { w.mu.Lock(); w.errs = append(w.errs, err); w.mu.Unlock() }

func (w *warnings) is(target error) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.errs {
		if errors.Is(e, target) {
			return true
		}
	}
	return false
}

func (w *warnings) len() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.errs) }

func openTest(t *testing.T, path string, opts ...Option) (*Cache, *warnings) {
	t.Helper()
	w := &warnings{}
	c, err := Open(append([]Option{WithPath(path), WithWarn(w.add), WithPretuned(nil)}, opts...)...)
	require.NoError(t, err)
	return c, w
}

func measured(algo string, ns int64) Choice {
	return Choice{Candidate: Candidate{Algorithm: algo, Tile: "b64x64", SplitK: 2}, Time: time.Duration(ns), Tried: 3, Total: 4}
}

// parseFile checks that path holds a valid current-schema file and returns
// its entries.
func parseFile(t *testing.T, path string) map[Key]Entry {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	l := decodeFile(data, path)
	require.Equal(t, stateOK, l.state, "warnings: %v", l.warnings)
	require.Empty(t, l.warnings)
	return l.entries
}

func noTempFiles(t *testing.T, dir string) {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.tmp-*"))
	require.NoError(t, err)
	require.Empty(t, names)
}

func TestCacheRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "autotune.json")
	c, w := openTest(t, path)
	require.Equal(t, path, c.Path())
	k := testKey()
	_, _, ok := c.Lookup(k)
	require.False(t, ok)
	_, err := os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "Open must not create the file")

	k0 := k
	k0.LogN = Bucket(0)
	k1 := k
	k1.Dir = DGrad
	k2 := k
	k2.Device = Device{Name: "NVIDIA A100 80GB PCIe", SMs: 108, Major: 8}
	want := map[Key]Choice{k: measured("masked_implicit_gemm_splitk", 81250), k0: measured("explicit_gemm", 1), k1: measured("implicit_gemm", 99), k2: measured("implicit_gemm_splitk", 7)}
	for key, ch := range want {
		require.NoError(t, c.Store(key, ch))
	}
	for key, ch := range want {
		got, src, ok := c.Lookup(key)
		require.True(t, ok)
		require.Equal(t, FromCache, src)
		require.Equal(t, ch, got)
	}

	// A second cache on the same file sees everything.
	c2, w2 := openTest(t, path)
	for key, ch := range want {
		got, src, ok := c2.Lookup(key)
		require.True(t, ok, "%v", key)
		require.Equal(t, FromCache, src)
		require.Equal(t, ch, got)
	}
	entries := parseFile(t, path)
	require.Len(t, entries, len(want))
	for key, ch := range want {
		require.Equal(t, ch, entries[key].Choice)
		require.False(t, entries[key].Updated.IsZero())
	}
	require.Len(t, c2.Entries(Device{}), 4)
	require.Len(t, c2.Entries(h200), 3)
	require.Equal(t, 0, w.len()+w2.len())
	noTempFiles(t, filepath.Dir(path))

	// The file has the documented layout.
	var raw map[string]any
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &raw))
	require.Equal(t, Format, raw["format"])
	require.EqualValues(t, Schema, raw["schema"])
	require.Len(t, raw["devices"], 2)
}

func TestCacheStoreRejectsBadInput(t *testing.T) {
	c, _ := openTest(t, "")
	k := testKey()
	k.V = 0
	require.ErrorIs(t, c.Store(k, measured("a", 1)), ErrKey)
	require.ErrorIs(t, c.Store(testKey(), Choice{Candidate: Candidate{Algorithm: "a"}}), ErrCandidate, "unmeasured choice not marked heuristic")
	require.ErrorIs(t, c.Store(testKey(), Choice{}), ErrCandidate)
	require.NoError(t, c.Store(testKey(), Choice{Candidate: Candidate{Algorithm: "a"}, Heuristic: true}))
}

func TestCacheInMemory(t *testing.T) {
	t.Setenv(EnvCache, filepath.Join(t.TempDir(), "must-not-exist.json"))
	c, err := Open(InMemory(), WithPretuned(nil))
	require.NoError(t, err)
	require.Equal(t, "", c.Path())
	require.NoError(t, c.Store(testKey(), measured("a", 5)))
	got, _, ok := c.Lookup(testKey())
	require.True(t, ok)
	require.Equal(t, "a", got.Algorithm)
	_, err = os.Stat(os.Getenv(EnvCache))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestCachePathFromEnv(t *testing.T) {
	p := filepath.Join(t.TempDir(), "env.json")
	t.Setenv(EnvCache, p)
	got, err := DefaultPath()
	require.NoError(t, err)
	require.Equal(t, p, got)
	c, err := Open(WithPretuned(nil), WithWarn(func(err error) { t.Errorf("warning: %v", err) }))
	require.NoError(t, err)
	require.Equal(t, p, c.Path())
	require.NoError(t, c.Store(testKey(), measured("a", 5)))
	require.Len(t, parseFile(t, p), 1)

	t.Setenv(EnvCache, "")
	got, err = DefaultPath()
	if err == nil {
		dir, _ := os.UserCacheDir()
		require.Equal(t, filepath.Join(dir, "flexgemm-go", "autotune.json"), got)
	}
}

func TestCacheMergesOtherWriters(t *testing.T) {
	// Two caches in one process behave like two processes: neither loses
	// the other's entries (FlexGEMM's save is last-writer-wins).
	path := filepath.Join(t.TempDir(), "a.json")
	a, _ := openTest(t, path)
	b, _ := openTest(t, path)
	ka, kb := testKey(), testKey()
	kb.Ci = 128
	require.NoError(t, a.Store(ka, measured("from_a", 1)))
	require.NoError(t, b.Store(kb, measured("from_b", 2)))
	entries := parseFile(t, path)
	require.Len(t, entries, 2)
	require.Equal(t, "from_a", entries[ka].Choice.Algorithm)
	require.Equal(t, "from_b", entries[kb].Choice.Algorithm)
	// a learns b's entry on its next store or on Reload.
	_, _, ok := a.Lookup(kb)
	require.False(t, ok)
	a.Reload()
	got, _, ok := a.Lookup(kb)
	require.True(t, ok)
	require.Equal(t, "from_b", got.Algorithm)
	// For one key the most recent store wins.
	require.NoError(t, b.Store(ka, measured("newer_from_b", 3)))
	require.Equal(t, "newer_from_b", parseFile(t, path)[ka].Choice.Algorithm)
}

func TestCacheBadFiles(t *testing.T) {
	v2ok, err := encodeFile(map[Key]Entry{testKey(): {Key: testKey(), Choice: measured("kept", 10)}}, "")
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		content  string
		warn     error // the warning expected
		kept     int   // entries that survive
		rebuilt  bool  // the file was moved aside and rewritten
		readOnly bool
	}{
		{name: "garbage", content: "\x00\x01not json at all", warn: ErrCorrupt, rebuilt: true},
		{name: "empty file", content: "", warn: ErrCorrupt, rebuilt: true},
		{name: "truncated", content: string(v2ok[:len(v2ok)/2]), warn: ErrCorrupt, rebuilt: true},
		{name: "trailing garbage", content: string(v2ok) + "}{", warn: ErrCorrupt, rebuilt: true},
		{name: "json array", content: `[1, 2, 3]`, warn: ErrForeign, rebuilt: true},
		{name: "json number", content: `42`, warn: ErrForeign, rebuilt: true},
		{name: "flexgemm cache", content: `{"NVIDIA H200": {"flex_gemm.kernels.triton.spconv.x": {"(14, 64, 64, 27)": {"SPLITK": 1}}}}`, warn: ErrForeign, rebuilt: true},
		{name: "wrong format marker", content: `{"format": "something-else", "schema": 2, "devices": []}`, warn: ErrForeign, rebuilt: true},
		{name: "schema not a number", content: `{"format": "flexgemm-go/autotune", "schema": "two", "devices": []}`, warn: ErrCorrupt, rebuilt: true},
		{name: "schema missing", content: `{"format": "flexgemm-go/autotune", "devices": []}`, warn: ErrCorrupt, rebuilt: true},
		{name: "unknown old schema", content: `{"format": "flexgemm-go/autotune", "schema": 0, "entries": {}}`, warn: ErrSchema, rebuilt: true},
		{name: "devices of wrong type", content: `{"format": "flexgemm-go/autotune", "schema": 2, "devices": {"a": 1}}`, warn: ErrCorrupt, rebuilt: true},
		{name: "bad entry dropped", content: strings.Replace(string(v2ok), `"v": 27`, `"v": 0`, 1), warn: ErrEntry},
		{name: "newer schema", content: `{"format": "flexgemm-go/autotune", "schema": 99, "whatever": [1]}`, warn: ErrSchema, readOnly: true},
		{name: "valid", content: string(v2ok), kept: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "autotune.json")
			require.NoError(t, os.WriteFile(path, []byte(tc.content), 0o644))
			c, w := openTest(t, path)
			if tc.warn != nil {
				require.True(t, w.is(tc.warn), "want a %v warning, got %v", tc.warn, w.errs)
			} else {
				require.Equal(t, 0, w.len(), "%v", w.errs)
			}
			require.Len(t, c.Entries(Device{}), tc.kept)
			bad, _ := filepath.Glob(path + ".bad-*")
			if tc.rebuilt {
				require.Len(t, bad, 1, "the unusable file is kept aside")
				moved, err := os.ReadFile(bad[0])
				require.NoError(t, err)
				require.Equal(t, tc.content, string(moved))
				require.Empty(t, parseFile(t, path), "rebuilt as an empty valid file")
			} else {
				require.Empty(t, bad)
			}
			k := testKey()
			k.Co = 32
			err := c.Store(k, measured("new", 7))
			if tc.readOnly {
				require.ErrorIs(t, err, ErrReadOnly)
				data, rerr := os.ReadFile(path)
				require.NoError(t, rerr)
				require.Equal(t, tc.content, string(data), "a newer file is never touched")
				got, _, ok := c.Lookup(k)
				require.True(t, ok, "kept in memory")
				require.Equal(t, "new", got.Algorithm)
				return
			}
			require.NoError(t, err)
			entries := parseFile(t, path)
			require.Len(t, entries, tc.kept+1)
			require.Equal(t, "new", entries[k].Choice.Algorithm)
			noTempFiles(t, dir)
		})
	}
}

func TestCacheUnreadableFileStaysInMemory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "autotune.json")
	require.NoError(t, os.Mkdir(path, 0o755)) // a directory where the file should be
	c, w := openTest(t, path)
	require.True(t, w.is(ErrIO), "%v", w.errs)
	err := c.Store(testKey(), measured("a", 1))
	require.ErrorIs(t, err, ErrIO)
	got, _, ok := c.Lookup(testKey())
	require.True(t, ok)
	require.Equal(t, "a", got.Algorithm)
}

func TestCacheMigratesSchema1(t *testing.T) {
	v1 := `{"format": "flexgemm-go/autotune", "schema": 1, "devices": {
	  "NVIDIA H200|132|9.0": {
	    "subm_conv|fwd|fp16|0|27|64|64|13": {"algo": "masked_implicit_gemm_splitk", "tile": "b64x128", "split_k": 2, "time_us": 81.25},
	    "subm_conv|wgrad|fp32|1|27|64|64|-1": {"algo": "explicit_gemm", "time_us": 0},
	    "subm_conv|fwd|fp16|0|27|64": {"algo": "too_few_fields", "time_us": 1},
	    "subm_conv|fwd|fp16|1|27|64|64|13": {"algo": "tf32_with_fp16", "time_us": 1}},
	  "bad device": {"subm_conv|fwd|fp16|0|27|64|64|13": {"algo": "x", "time_us": 1}}}}`
	dir := t.TempDir()
	path := filepath.Join(dir, "autotune.json")
	require.NoError(t, os.WriteFile(path, []byte(v1), 0o644))
	c, w := openTest(t, path)
	require.True(t, w.is(ErrSchema), "migration is reported")
	require.True(t, w.is(ErrEntry), "dropped entries are reported")

	k := testKey()
	got, src, ok := c.Lookup(k)
	require.True(t, ok)
	require.Equal(t, FromCache, src)
	require.Equal(t, Choice{Candidate: Candidate{"masked_implicit_gemm_splitk", "b64x128", 2}, Time: 81250 * time.Nanosecond}, got)
	k0 := Key{Device: h200, Op: OpSubmConv, Dir: WGrad, DType: "fp32", TF32: true, V: 27, Ci: 64, Co: 64, LogN: -1}
	got, _, ok = c.Lookup(k0)
	require.True(t, ok)
	require.True(t, got.Heuristic, "an unmeasured schema-1 entry becomes heuristic")
	require.Len(t, c.Entries(Device{}), 2)

	// The file is rewritten in the current schema, the old one kept aside.
	entries := parseFile(t, path)
	require.Len(t, entries, 2)
	require.Equal(t, "masked_implicit_gemm_splitk", entries[k].Choice.Algorithm)
	noTempFiles(t, dir)
}

func TestPretunedPrecedence(t *testing.T) {
	k1, k2 := testKey(), testKey()
	k2.Ci = 256
	table, err := encodeFile(map[Key]Entry{
		k1: {Key: k1, Choice: measured("pretuned_1", 100)},
		k2: {Key: k2, Choice: Choice{Candidate: Candidate{Algorithm: "pretuned_2"}, Heuristic: true}},
	}, "test table")
	require.NoError(t, err)
	fsys := fstest.MapFS{"h200.json": {Data: table}, "README.txt": {Data: []byte("ignored")}}

	path := filepath.Join(t.TempDir(), "autotune.json")
	c, w := openTest(t, path, WithPretuned(fsys))
	got, src, ok := c.Lookup(k1)
	require.True(t, ok)
	require.Equal(t, FromPretuned, src)
	require.Equal(t, "pretuned_1", got.Algorithm)

	// The user's entry wins over the table.
	require.NoError(t, c.Store(k1, measured("user_1", 50)))
	got, src, ok = c.Lookup(k1)
	require.True(t, ok)
	require.Equal(t, FromCache, src)
	require.Equal(t, "user_1", got.Algorithm)
	got, src, _ = c.Lookup(k2)
	require.Equal(t, FromPretuned, src)
	require.True(t, got.Heuristic)

	// Pre-tuned entries are never written into the user's file.
	entries := parseFile(t, path)
	require.Len(t, entries, 1)
	require.Equal(t, "user_1", entries[k1].Choice.Algorithm)
	require.Equal(t, 0, w.len())

	// A broken table is an error of Open, not a warning.
	_, err = Open(InMemory(), WithPretuned(fstest.MapFS{"x.json": {Data: []byte("{")}}))
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestEmbeddedTablesAreValid(t *testing.T) {
	names, err := pretunedFiles.ReadDir("pretuned")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	entries, err := loadTables(embeddedTables())
	require.NoError(t, err)
	for _, e := range entries {
		// Only measured entries or defaults marked heuristic may ship.
		require.True(t, e.Choice.Heuristic || e.Choice.Time > 0, "%v", e.Key)
	}
	c, err := Open(InMemory())
	require.NoError(t, err)
	require.Len(t, c.pre, len(entries))
}

func TestWriteTable(t *testing.T) {
	c, _ := openTest(t, "")
	k1, k2, k3 := testKey(), testKey(), testKey()
	k2.Co = 16
	k3.Device.Name = "other"
	require.NoError(t, c.Store(k1, measured("m1", 10)))
	require.NoError(t, c.Store(k2, Choice{Candidate: Candidate{Algorithm: "h"}, Heuristic: true}))
	require.NoError(t, c.Store(k3, measured("m3", 10)))
	var buf bytes.Buffer
	require.NoError(t, c.WriteTable(&buf, h200, "measured on a test"))
	table, err := loadTables(fstest.MapFS{"t.json": {Data: buf.Bytes()}})
	require.NoError(t, err)
	require.Len(t, table, 1, "only measured entries of the device")
	require.Equal(t, "m1", table[k1].Choice.Algorithm)
	require.Contains(t, buf.String(), "measured on a test")
	require.ErrorIs(t, c.WriteTable(&buf, Device{}, ""), ErrKey)
}

func TestEncodeIsDeterministic(t *testing.T) {
	m := map[Key]Entry{}
	for ci := 1; ci <= 20; ci++ {
		k := testKey()
		k.Ci = ci
		m[k] = Entry{Key: k, Choice: measured("a", int64(ci)), Updated: time.Unix(int64(ci), 0)}
	}
	a, err := encodeFile(m, "")
	require.NoError(t, err)
	for range 5 {
		b, err := encodeFile(m, "")
		require.NoError(t, err)
		require.Equal(t, a, b)
	}
	l := decodeFile(a, "x")
	require.Equal(t, stateOK, l.state)
	require.Len(t, l.entries, 20)
	for k, e := range m {
		require.Equal(t, e.Choice, l.entries[k].Choice)
		require.True(t, e.Updated.Equal(l.entries[k].Updated))
	}
}

func BenchmarkLookup(b *testing.B) {
	c, err := Open(InMemory(), WithPretuned(nil))
	require.NoError(b, err)
	for ci := 1; ci <= 256; ci++ {
		k := testKey()
		k.Ci = ci
		require.NoError(b, c.Store(k, measured("a", 1)))
	}
	k := testKey()
	k.Ci = 128
	for b.Loop() {
		if _, _, ok := c.Lookup(k); !ok {
			b.Fatal("miss")
		}
	}
}

func BenchmarkStore(b *testing.B) {
	c, err := Open(WithPath(filepath.Join(b.TempDir(), "a.json")), WithPretuned(nil), WithWarn(func(err error) { b.Error(err) }))
	require.NoError(b, err)
	i := 0
	for b.Loop() {
		k := testKey()
		k.Ci = 1 + i%64
		i++
		require.NoError(b, c.Store(k, measured("a", 1)))
	}
}
