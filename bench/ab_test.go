package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func abRec(commit, mode string, res int, ms float64, peak float64) Record {
	r := Record{Impl: "flexgemm-go", Mode: mode, DType: "fp16", RES: res, C: 64, L: 2, MS: ms, Commit: commit}
	if peak > 0 {
		r.PeakMemGB = &peak
	}
	return r
}

func TestABSummary(t *testing.T) {
	recs := []Record{
		abRec("s1-B-r1", "train", 8, 2.0, 1.5),
		abRec("s1-T-r1", "train", 8, 1.8, 1.4),
		abRec("s1-T-r2", "train", 8, 1.9, 1.45),
		abRec("s1-B-r2", "train", 8, 2.2, 1.5),
		abRec("s1-B-r3", "train", 8, 2.1, 1.5),
		abRec("s1-T-r3", "train", 8, 1.7, 1.4),
		abRec("s1-B-r1", "infer", 8, 1.0, 0),
		{Impl: "flexgemm-go", Mode: "infer", DType: "fp16", RES: 8, C: 64, L: 2, Commit: "s1-T-r1", Error: "out of memory"},
		{Impl: "flexgemm", Mode: "train", DType: "fp16", RES: 8, C: 64, L: 2, MS: 9},
		abRec("742a7fa", "train", 8, 5, 0),
	}
	s, err := readAB(recs)
	require.NoError(t, err)
	require.Equal(t, []string{"B", "T"}, s.variants)
	require.Len(t, s.keys, 2)
	require.Equal(t, 2, s.skipped, "FlexGEMM's record and a plain commit")
	var out bytes.Buffer
	require.NoError(t, s.write(&out, "B"))
	got := out.String()
	require.Contains(t, got, "| subm_conv | train | fp16 | 8, 64, 2 | B | 2.000 / 2.200 / 2.100 | 2.100 | – | 1.5000 |")
	// T's median 1.8 against B's 2.1: −14.3 %; its peak the largest round's.
	require.Contains(t, got, "| subm_conv | train | fp16 | 8, 64, 2 | T | 1.800 / 1.900 / 1.700 | 1.800 | -14.3 % | 1.4500 |")
	require.Contains(t, got, "| subm_conv | infer | fp16 | 8, 64, 2 | T |  (1 failed) | – | – | – |")
	require.Contains(t, got, "2 records without an A/B commit skipped.")

	out.Reset()
	require.NoError(t, s.write(&out, "T"))
	require.Contains(t, out.String(), "| B | 2.000 / 2.200 / 2.100 | 2.100 | +16.7 % |")
	require.ErrorContains(t, s.write(&out, "N"), `base variant "N" not in the run`)

	// With -power records, the rounds' median clock and capped share.
	p1, p2 := abRec("s3-B-r1", "infer", 512, 4.4, 0), abRec("s3-B-r2", "infer", 512, 4.5, 0)
	p1.Power = &PowerRecord{SMMHzMean: 1700, CappedFraction: 0.5}
	p2.Power = &PowerRecord{SMMHzMean: 1800, CappedFraction: 0.7}
	s, err = readAB([]Record{p1, p2, abRec("s3-N-r1", "infer", 512, 3.0, 0)})
	require.NoError(t, err)
	out.Reset()
	require.NoError(t, s.write(&out, "B"))
	require.Contains(t, out.String(), "| peak GiB | SM MHz | capped |")
	require.Contains(t, out.String(), "| B | 4.400 / 4.500 | 4.450 | – | – | 1750 | 60 % |")
	require.Contains(t, out.String(), "| N | 3.000 | 3.000 | -32.6 % | – | – | – |")

	for name, bad := range map[string][]Record{
		"no A/B records": {abRec("742a7fa", "train", 8, 1, 0)},
		"two tags":       {abRec("s1-B-r1", "train", 8, 1, 0), abRec("s2-B-r2", "train", 8, 1, 0)},
		"a round twice":  {abRec("s1-B-r1", "train", 8, 1, 0), abRec("s1-B-r1", "train", 8, 1.1, 0)},
	} {
		_, err := readAB(bad)
		require.Error(t, err, name)
	}
}

// TestABRunScript runs bench/ab_run.sh with a stand-in for the bench
// binary that records its flags and environment: the variants' order
// rotates by round, KEY=VALUE words go to the environment (BIN=PATH picks
// the variant's binary instead), the rest are flags, and the summary comes
// last.
func TestABRunScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "bench")
	out := filepath.Join(dir, "ab.jsonl")
	log := filepath.Join(dir, "calls.txt")
	// The stand-in echoes its `ab` call (the summary, tested above) and
	// otherwise logs the call and appends one record.
	script := fmt.Sprintf(`#!/usr/bin/env bash
if [[ $1 == ab ]]; then echo "summary $*"; exit 0; fi
o= c=
args=("$@")
for ((i = 0; i < $#; i++)); do
  case ${args[i]} in -o) o=${args[i+1]} ;; -commit) c=${args[i+1]} ;; esac
done
echo "$c KNOB=${KNOB:-unset} $*" >> %q
echo '{"impl":"flexgemm-go","mode":"train","dtype":"fp16","RES":8,"C":4,"L":2,"ms":1,"commit":"'$c'"}' >> "$o"
`, log)
	require.NoError(t, os.WriteFile(fake, []byte(script), 0o755))
	cmd := exec.Command("bash", "ab_run.sh", out, "-cfgs 8,4,2 -modes train", "A=KNOB=0 -seed 7", "B=", "C=-backward params-first")
	cmd.Env = append(os.Environ(), "BENCH="+fake, "ROUNDS=2", "TAG=t1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	require.Equal(t, "summary ab -base A "+out+"\n", stdout.String())
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	require.Len(t, lines, 6)
	order := make([]string, len(lines))
	for i, l := range lines {
		order[i] = strings.Fields(l)[0]
	}
	require.Equal(t, []string{"t1-A-r1", "t1-B-r1", "t1-C-r1", "t1-B-r2", "t1-C-r2", "t1-A-r2"}, order)
	require.Equal(t, "t1-A-r1 KNOB=0 -cfgs 8,4,2 -modes train -seed 7 -o "+out+" -commit t1-A-r1", lines[0])
	require.Equal(t, "t1-B-r1 KNOB=unset -cfgs 8,4,2 -modes train -o "+out+" -commit t1-B-r1", lines[1])
	require.Equal(t, "t1-C-r1 KNOB=unset -cfgs 8,4,2 -modes train -backward params-first -o "+out+" -commit t1-C-r1", lines[2])

	// BIN=PATH runs a variant on another binary (not passed on as an
	// environment variable), and the first variant's binary prints the
	// summary.
	fake2 := filepath.Join(dir, "bench2")
	require.NoError(t, os.WriteFile(fake2, []byte(strings.Replace(strings.Replace(script, `echo "summary $*"`, `echo "summary2 $*"`, 1),
		`echo "$c KNOB=`, `echo "$c BIN=${BIN:-unset} two KNOB=`, 1)), 0o755))
	require.NoError(t, os.Remove(log))
	out2 := filepath.Join(dir, "ab2.jsonl")
	cmd = exec.Command("bash", "ab_run.sh", out2, "-modes train", "X=BIN="+fake2+" KNOB=1", "Y=")
	cmd.Env = append(os.Environ(), "BENCH="+fake, "ROUNDS=1", "TAG=t2")
	stdout.Reset()
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	require.Equal(t, "summary2 ab -base X "+out2+"\n", stdout.String())
	data, err = os.ReadFile(log)
	require.NoError(t, err)
	require.Equal(t, "t2-X-r1 BIN=unset two KNOB=1 -modes train -o "+out2+" -commit t2-X-r1\n"+
		"t2-Y-r1 KNOB=unset -modes train -o "+out2+" -commit t2-Y-r1\n", string(data))

	bad := exec.Command("bash", "ab_run.sh", out, "-modes train", "A-1=")
	bad.Env = append(os.Environ(), "BENCH="+fake)
	msg, err := bad.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(msg), "is not NAME=SPEC")
}
