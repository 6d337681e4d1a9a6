package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWriteReadmeTable(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rec := func(impl, mode, dtype string, res int, ms, tflops float64, peak *float64) Record {
		return Record{Impl: impl, Algo: "masked_implicit_gemm_splitk", Mode: mode, DType: dtype, RES: res, C: 64, L: 2, MS: ms, TFLOPS: tflops, PeakMemGB: peak}
	}
	recs := []Record{
		rec("flexgemm", "infer", "fp16", 8, 3, 1, f(0.25)),
		rec("flexgemm-go", "infer", "fp16", 8, 2, 1.5, f(0.125)),
		rec("flexgemm", "train", "tf32", 64, 9, 10, f(1)),
		rec("flexgemm-go", "train", "tf32", 64, 5, 18, nil), // no peak: a dash
		rec("flexgemm", "train", "fp16", 64, 10, 79, f(0.5)),
		rec("flexgemm-go", "train", "fp16", 64, 99, 1, f(0.5)), // replaced by the later line
		rec("flexgemm-go", "train", "fp16", 64, 2.5, 316, f(0.4)),
		rec("flexgemm", "train", "fp16", 16, 4, 2, f(0.1)),
		rec("flexgemm-go", "train", "fp16", 16, 1, 8, f(0.1)),
		rec("flexgemm-go", "train", "fp16", 32, 1, 8, f(0.1)),                                        // no baseline: left out
		rec("other", "train", "fp16", 16, 0.5, 16, f(0.1)),                                           // neither side
		{Impl: "flexgemm-go", Op: opDown, Mode: "train", DType: "fp16", RES: 16, C: 64, L: 2, MS: 1}, // not subm_conv
		{Impl: "flexgemm", Op: opDown, Mode: "train", DType: "fp16", RES: 16, C: 64, L: 2, MS: 2},
	}
	rows, _ := compareRecords(recs, "flexgemm")
	var buf bytes.Buffer
	require.NoError(t, writeReadmeTable(&buf, rows, "flexgemm-go"))
	want := `| mode | dtype | RES, C, L | ours ms | FlexGEMM ms | speed vs FlexGEMM | ours useful TFLOP/s | % of 790 | ours / FlexGEMM peak GiB |
|---|---|---|---:|---:|---:|---:|---:|---:|
| train | fp16 | 16, 64, 2 | 1.00 | 4.00 | 4.00× | 8 | 1.0 % | 0.1000 / 0.100 |
| train | fp16 | 64, 64, 2 | 2.50 | 10.00 | 4.00× | 316 | 40.0 % | 0.4000 / 0.500 |
| train | tf32 | 64, 64, 2 | 5.00 | 9.00 | 1.80× | 18 | 2.3 % | – / 1.000 |
| infer | fp16 | 8, 64, 2 | 2.00 | 3.00 | 1.500× | 2 | 0.2 % | 0.1250 / 0.250 |

train fp16: geometric mean 4.000× over 2 configurations (4.000× over the 1 from RES 32 up); lowest 4.000× at (16, 64, 2)
train tf32: geometric mean 1.800× over 1 configurations; lowest 1.800× at (64, 64, 2)
infer fp16: geometric mean 1.500× over 1 configurations; lowest 1.500× at (8, 64, 2)
`
	require.Equal(t, want, buf.String())
	require.Error(t, writeReadmeTable(&buf, rows, "nobody"))
	// Two algorithms of ours at one configuration: ambiguous.
	two, _ := compareRecords(append(recs, Record{Impl: "flexgemm-go", Algo: "explicit_gemm", Mode: "train", DType: "fp16", RES: 16, C: 64, L: 2, MS: 2}), "flexgemm")
	require.Error(t, writeReadmeTable(&buf, two, "flexgemm-go"))
}

// TestReadmeTableFromItsRecords checks that the README's performance table
// is what `bench compare -readme` prints for the records its command line
// names: the table regenerated from the committed run, row for row.
func TestReadmeTableFromItsRecords(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	text := string(readme)
	cmd := regexp.MustCompile("(?m)^go run ./bench compare -readme .*$").FindString(text)
	require.NotEmpty(t, cmd, "the README names the command that prints its table")
	var files []string
	for _, f := range strings.Fields(cmd) {
		if strings.HasSuffix(f, ".jsonl") {
			files = append(files, "../"+f)
		}
	}
	require.NotEmpty(t, files, cmd)
	recs, err := readRecordFiles(files)
	require.NoError(t, err)
	var ok []Record
	for _, r := range recs {
		if r.Error == "" {
			ok = append(ok, r)
		}
	}
	rows, _ := compareRecords(ok, "flexgemm")
	var buf bytes.Buffer
	require.NoError(t, writeReadmeTable(&buf, rows, "flexgemm-go"))
	table, _, _ := strings.Cut(buf.String(), "\n\n")
	require.Contains(t, text, table+"\n\n", "the README's table is not %q's output", cmd)
}

// TestCompareReadmeFlag runs `bench compare -readme` on the README's
// records: the table and the geometric means on stdout.
func TestCompareReadmeFlag(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := runMain([]string{"compare", "-readme", "results/h200-2026-12-05-s72.jsonl"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "| train | fp16 | 512, 128, 2 | 5.74 | 10.58 | 1.84× | 451 | 57.1 % | 1.6114 / 1.669 |")
	require.Contains(t, stdout.String(), "train fp16: geometric mean 2.280× over 8 configurations (1.810× over the 6 from RES 32 up); lowest 1.695× at (256, 256, 2)")
	require.Equal(t, 1, runMain([]string{"compare", "-readme", "-impl", "nobody", "results/h200-2026-12-05-s72.jsonl"}, &stdout, &stderr))
}
