package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

func TestParseConfigs(t *testing.T) {
	got, err := parseConfigs(" 8,1024,16; 64,64,2 ;")
	require.NoError(t, err)
	require.Equal(t, []config{{8, 1024, 16}, {64, 64, 2}}, got)
	got, err = parseConfigs(defaultConfigs)
	require.NoError(t, err)
	require.Len(t, got, 4)
	for _, bad := range []string{"", ";", "8,64", "8,64,2,1", "8,x,2", "0,64,2", "8,-1,2"} {
		_, err := parseConfigs(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestParseRunFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, err := parseRunFlags([]string{"-cfgs", "8,4,1", "-dtypes", "fp32,fp64", "-algo", "all", "-op", "subm_conv,grid_sample", "-modes", "infer"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, []config{{8, 4, 1}}, o.cfgs)
	require.Len(t, o.dtypes, 2)
	require.Equal(t, sparse.Algorithms, o.algos)
	require.Equal(t, []string{opSubm, opSample}, o.ops)
	require.Equal(t, []string{"infer"}, o.modes)
	require.Equal(t, deviceCPU, o.device)
	require.Equal(t, kmapAuto, o.kmap)
	require.Equal(t, 0, o.measure.iters, "automatic on the CPU")
	require.Equal(t, wgradAuto, o.wgrad)
	require.Equal(t, backwardInputFirst, o.backward, "FlexGEMM's order by default")
	o, err = parseRunFlags([]string{"-backward", "params-first"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, backwardParamsFirst, o.backward)
	o, err = parseRunFlags([]string{"-modes", "infer,map,infer_nomap"}, &stderr)
	require.NoError(t, err)
	require.Equal(t, []string{modeInfer, modeMap, modeInferNoMap}, o.modes)
	for _, bad := range [][]string{
		{"-dtypes", "fp16"}, {"-algo", "fastest"}, {"-op", "pool"}, {"-modes", "eval"},
		{"-batch", "0"}, {"-repeats", "0"}, {"-splitk", "-1"}, {"extra"},
		{"-device", "tpu"}, {"-kmap", "disk"}, {"-kmap", "gpu"}, {"-device", "cuda", "-dtypes", "fp64"},
		{"-device", "cuda", "-op", "grid_sample"}, {"-device", "cuda", "-gpu", "-1"}, {"-peaktflops", "-1"},
		{"-wgrad", "fp8"}, {"-backward", "sideways"}, {"-op", "grid_sample", "-modes", "map"}, {"-op", "subm_conv,sparse_conv_k2s2", "-modes", "infer_nomap"},
	} {
		_, err := parseRunFlags(bad, &stderr)
		require.Error(t, err, "%v", bad)
	}
}

func TestWeightGradDType(t *testing.T) {
	cuda, cpu := deviceDTypes[deviceCUDA], deviceDTypes[deviceCPU]
	for _, tc := range []struct {
		kind   string
		dt     dtypeInfo
		narrow bool
		name   string
	}{
		{wgradAuto, cuda["fp16"], true, "fp16"}, // FlexGEMM's .grad
		{wgradAuto, cuda["bf16"], true, "bf16"},
		{wgradAuto, cuda["tf32"], false, "fp32"},
		{wgradAuto, cuda["fp32"], false, "fp32"},
		{wgradAuto, cpu["fp64"], false, "fp64"},
		{wgradNarrow, cuda["fp16"], true, "fp16"},
		{wgradNarrow, cuda["tf32"], false, "fp32"}, // float32 storage: nothing to round to
		{wgradF32, cuda["fp16"], false, "fp32"},
		{wgradF32, cuda["bf16"], false, "fp32"},
	} {
		require.Equal(t, tc.narrow, narrowWeightGrad(tc.kind, tc.dt), "%s %s", tc.kind, tc.dt.name)
		require.Equal(t, tc.name, wgradDTypeName(tc.kind, tc.dt), "%s %s", tc.kind, tc.dt.name)
	}
}

// anchorLine is a line in the format flexgemm_bench.py writes.
const anchorLine = `{"impl": "flexgemm", "algo": "MASKED_IMPLICIT_GEMM_SPLITK", "mode": "train", "dtype": "fp16", "RES": 256, "C": 256, "L": 2, "N": 252392, "pairs": 3203048, "ms": 7.44, "ms_all": [7.41, 7.44, 7.52], "tflops": 338.7, "peak_mem_gb": 0.885, "warmup_s": 41.3}`

func TestRecordJSONFields(t *testing.T) {
	peak := 0.125
	rec := Record{Impl: "flexgemm-go", Algo: "auto", Mode: "train", DType: "fp32", RES: 8, C: 64, L: 2, N: 192, Pairs: 2544,
		MS: 1.5, MSAll: []float64{1.5, 1.4, 1.6}, TFLOPS: 0.01, PeakMemGB: &peak, WarmupS: 0.2, Op: opSubm,
		Device: "cpu: test, 2 cores", Commit: "abc123"}
	var buf bytes.Buffer
	require.NoError(t, writeRecord(&buf, rec))
	require.True(t, strings.HasSuffix(buf.String(), "}\n"))
	require.Equal(t, 1, strings.Count(buf.String(), "\n"), "one line per record")
	var ours map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &ours))
	var theirs map[string]any
	require.NoError(t, json.Unmarshal([]byte(anchorLine), &theirs))
	for field := range theirs {
		require.Contains(t, ours, field, "the anchor's field %q", field)
	}
	require.Equal(t, "cpu: test, 2 cores", ours["device"])
	require.Equal(t, "abc123", ours["commit"])
	require.Equal(t, 0.125, ours["peak_mem_gb"])

	// Unknown peak memory is written as null, not left out.
	rec.PeakMemGB = nil
	buf.Reset()
	require.NoError(t, writeRecord(&buf, rec))
	require.Contains(t, buf.String(), `"peak_mem_gb":null`)

	// Round trip.
	back, err := readRecords(&buf, "x")
	require.NoError(t, err)
	require.Equal(t, []Record{rec}, back)
}

func TestReadRecords(t *testing.T) {
	in := "device NVIDIA H200 torch 2.11\n" + anchorLine + "\n\n| a | table |\n" +
		`{"impl": "flexgemm-go", "algo": "auto", "mode": "infer", "dtype": "fp32", "RES": 8, "C": 64, "L": 2, "N": 192, "pairs": 2544, "ms": 0.5, "tflops": 0.1, "peak_mem_gb": null, "warmup_s": 0, "op": "subm_conv"}` + "\n"
	recs, err := readRecords(strings.NewReader(in), "in")
	require.NoError(t, err)
	require.Len(t, recs, 2)
	require.Equal(t, "flexgemm", recs[0].Impl)
	require.Equal(t, 252392, recs[0].N)
	require.Equal(t, int64(3203048), recs[0].Pairs)
	require.Equal(t, []float64{7.41, 7.44, 7.52}, recs[0].MSAll)
	require.Equal(t, 0.885, *recs[0].PeakMemGB)
	require.Equal(t, opSubm, recs[0].OpOrDefault(), "FlexGEMM records have no op")
	require.Nil(t, recs[1].PeakMemGB)

	for _, bad := range []string{
		`{"impl": "x", "mode": "train"`,
		`{"impl": "x", "mode": "train", "dtype": "fp16", "ms": 0}`,
		`{"mode": "train", "dtype": "fp16", "ms": 1}`,
		`{"impl": "x", "mode": "train", "dtype": "fp16", "ms": "fast"}`,
	} {
		_, err := readRecords(strings.NewReader("ok line\n"+bad+"\n"), "bad.jsonl")
		require.ErrorContains(t, err, "bad.jsonl:2", "%s", bad)
	}
}

func fakeRecords() []Record {
	rec := func(impl, algo, mode, dtype string, res, c, l, n int, ms float64) Record {
		// A made-up useful rate: 3.6 GFLOP per step.
		return Record{Impl: impl, Algo: algo, Mode: mode, DType: dtype, RES: res, C: c, L: l, N: n, MS: ms, TFLOPS: 3.6 / ms}
	}
	return []Record{
		rec("flexgemm", "MASKED_IMPLICIT_GEMM_SPLITK", "train", "fp32", 8, 64, 2, 192, 10),
		rec("flexgemm", "MASKED_IMPLICIT_GEMM_SPLITK", "train", "fp32", 16, 64, 2, 848, 20),
		rec("flexgemm", "MASKED_IMPLICIT_GEMM_SPLITK", "infer", "fp32", 8, 64, 2, 192, 3),
		rec("flexgemm-go", "auto", "train", "fp32", 16, 64, 2, 848, 80),
		rec("flexgemm-go", "auto", "train", "fp32", 8, 64, 2, 192, 99), // replaced by the later line
		rec("flexgemm-go", "auto", "train", "fp32", 8, 64, 2, 192, 4),
		rec("flexgemm-go", "explicit_gemm", "train", "fp32", 8, 64, 2, 192, 20),
		rec("flexgemm-go", "auto", "infer", "fp32", 8, 64, 2, 200, 6),  // N differs
		rec("flexgemm-go", "auto", "train", "fp64", 8, 64, 2, 192, 10), // no fp64 baseline
	}
}

func TestCompareRecords(t *testing.T) {
	rows, unmatched := compareRecords(fakeRecords(), "flexgemm")
	require.Len(t, unmatched, 1)
	require.Equal(t, "fp64", unmatched[0].DType)
	type want struct {
		mode, algo string
		res        int
		ms, base   float64
		ratio      float64
		n, baseN   int
	}
	wants := []want{
		{"infer", "auto", 8, 6, 3, 0.5, 200, 192},
		{"train", "auto", 8, 4, 10, 2.5, 192, 192},
		{"train", "explicit_gemm", 8, 20, 10, 0.5, 192, 192},
		{"train", "auto", 16, 80, 20, 0.25, 848, 848},
	}
	require.Len(t, rows, len(wants))
	for i, w := range wants {
		r := rows[i]
		require.Equal(t, w.mode, r.Key.Mode, "row %d", i)
		require.Equal(t, w.algo, r.Algo, "row %d", i)
		require.Equal(t, w.res, r.Key.RES, "row %d", i)
		require.Equal(t, opSubm, r.Key.Op)
		require.Equal(t, w.ms, r.MS, "row %d", i)
		require.Equal(t, w.base, r.BaseMS, "row %d", i)
		require.Equal(t, w.ratio, r.Ratio, "row %d", i)
		require.Equal(t, w.n, r.N, "row %d", i)
		require.Equal(t, w.baseN, r.BaseN, "row %d", i)
	}

	// Another baseline name: flexgemm-go's explicit vs auto is not a thing,
	// but any impl can be the baseline.
	rows, _ = compareRecords(fakeRecords(), "flexgemm-go")
	require.Len(t, rows, 3)
	for _, r := range rows {
		require.Equal(t, "flexgemm", r.Impl)
	}
}

func TestWriteRatioTable(t *testing.T) {
	rows, _ := compareRecords(fakeRecords(), "flexgemm")
	var buf bytes.Buffer
	writeRatioTable(&buf, rows, "flexgemm")
	want := `| op | mode | dtype | RES,C,L | N | impl | algo | ms | flexgemm ms | speed vs flexgemm | TFLOP/s | flexgemm TFLOP/s |
|---|---|---|---|---:|---|---|---:|---:|---:|---:|---:|
| subm_conv | infer | fp32 | 8,64,2 | 200 (flexgemm: 192, differs!) | flexgemm-go | auto | 6 | 3 | 0.500× | 0.6 | 1.2 |
| subm_conv | train | fp32 | 8,64,2 | 192 | flexgemm-go | auto | 4 | 10 | 2.500× | 0.9 | 0.36 |
| subm_conv | train | fp32 | 8,64,2 | 192 | flexgemm-go | explicit_gemm | 20 | 10 | 0.500× | 0.18 | 0.36 |
| subm_conv | train | fp32 | 16,64,2 | 848 | flexgemm-go | auto | 80 | 20 | 0.250× | 0.045 | 0.18 |
`
	require.Equal(t, want, buf.String())
}

func TestDrawRatioChart(t *testing.T) {
	rows, _ := compareRecords(fakeRecords(), "flexgemm")
	var buf bytes.Buffer
	for _, o := range []chartOptions{{}, {target: 1.5}} {
		buf.Reset()
		require.NoError(t, drawRatioChart(&buf, rows, "flexgemm", o))
		img, err := png.Decode(&buf)
		require.NoError(t, err)
		require.Greater(t, img.Bounds().Dx(), 100)
		require.Greater(t, img.Bounds().Dy(), 100)
	}
	require.Error(t, drawRatioChart(&buf, nil, "flexgemm", chartOptions{}))
}

func TestCompareMain(t *testing.T) {
	dir := t.TempDir()
	var ours, theirs bytes.Buffer
	for _, r := range fakeRecords() {
		w := &ours
		if r.Impl == "flexgemm" {
			w = &theirs
		}
		require.NoError(t, writeRecord(w, r))
	}
	fo, ft := filepath.Join(dir, "go.jsonl"), filepath.Join(dir, "flexgemm.jsonl")
	require.NoError(t, os.WriteFile(fo, ours.Bytes(), 0o644))
	require.NoError(t, os.WriteFile(ft, append([]byte("device NVIDIA H200 torch 2.11\n"), theirs.Bytes()...), 0o644))
	pngPath := filepath.Join(dir, "ratios.png")
	var stdout, stderr bytes.Buffer
	code := runMain([]string{"compare", "-png", pngPath, fo, ft}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "| subm_conv | train | fp32 | 8,64,2 | 192 | flexgemm-go | auto | 4 | 10 | 2.500× | 0.9 | 0.36 |")
	require.Contains(t, stderr.String(), "no flexgemm record for flexgemm-go subm_conv train fp64 8,64,2")
	f, err := os.Open(pngPath)
	require.NoError(t, err)
	defer f.Close()
	_, err = png.Decode(f)
	require.NoError(t, err)

	require.Equal(t, 1, runMain([]string{"compare"}, &stdout, &stderr))
	require.Equal(t, 1, runMain([]string{"compare", "-base", "nobody", fo, ft}, &stdout, &stderr))
	require.Equal(t, 1, runMain([]string{"compare", filepath.Join(dir, "missing.jsonl")}, &stdout, &stderr))
}

func TestWorkloadCounts(t *testing.T) {
	dt := deviceDTypes[deviceCPU]["fp32"]
	coords, ext := synth.SphereShell(8, 1)
	sc := scene{coords: coords, ext: ext, res: 8, source: "sphere"}

	w, err := newWorkload(sc, params{op: opSubm, C: 4, L: 3, dtype: dt, seed: 1})
	require.NoError(t, err)
	require.Equal(t, 192, w.n) // FlexGEMM's table: RES 8 → N 192, P 2,544
	require.Equal(t, int64(2544), w.pairs)
	require.Equal(t, 3, w.l)
	require.Equal(t, 2.0*2544*4*4*3, w.flops["infer"])
	require.Equal(t, 3*w.flops["infer"], w.flops["train"])
	require.Equal(t, w.flops["infer"], w.flops[modeInferNoMap], "the same convolutions, the map built before")
	require.Zero(t, w.flops[modeMap])
	require.Len(t, w.steps, len(allModes))
	for _, mode := range []string{modeMap, modeInferNoMap, modeInferNoMap, modeMap} {
		require.NoError(t, w.steps[mode](), mode) // infer_nomap builds its map once, then reuses it
	}
	w.close()

	w, err = newWorkload(sc, params{op: opDown, C: 4, L: 2, dtype: dt, seed: 1})
	require.NoError(t, err)
	require.Equal(t, 192, w.n)
	maps, err := downMaps(hostMaps(sc, kmapCPU, func(*kmap.Map) {}), sc, 2, func(int) tableUse { return tableUse{} })
	require.NoError(t, err)
	// Every input of a kernel-2 stride-2 map feeds exactly one output.
	require.Equal(t, int64(192), maps[0].Pairs().Count())
	require.Equal(t, int64(maps[1].NIn), maps[1].Pairs().Count())
	require.Equal(t, int64(192+maps[0].NOut), w.pairs)
	require.Equal(t, 2.0*float64(w.pairs)*16, w.flops["infer"])
	_, err = newWorkload(sc, params{op: opDown, C: 4, L: 4, dtype: dt, seed: 1})
	require.Error(t, err, "8 → 4 → 2 → 1 → nothing")

	w, err = newWorkload(sc, params{op: opSample, C: 4, L: 1, dtype: dt, seed: 1})
	require.NoError(t, err)
	require.Equal(t, 192, w.n)
	require.Greater(t, w.pairs, int64(64), "the sphere points hit voxels")
	require.LessOrEqual(t, w.pairs, int64(8*64))
	require.Equal(t, 2.0*float64(w.pairs)*4, w.flops["infer"])

	for _, p := range []params{{op: "pool", C: 4, L: 1, dtype: dt}, {op: opSubm, C: 0, L: 1, dtype: dt}, {op: opSubm, C: 4, L: 0, dtype: dt}} {
		_, err := newWorkload(sc, p)
		require.Error(t, err, "%+v", p)
	}
}

func TestSpherePoints(t *testing.T) {
	for _, tc := range []struct{ res, batch int }{{1, 1}, {8, 1}, {16, 2}} {
		pts := spherePoints(tc.res, tc.batch)
		require.Len(t, pts, 3*tc.batch*tc.res*tc.res)
		c, r := float64(tc.res)/2, float64(tc.res)/2-0.5
		for i := 0; i < len(pts); i += 3 {
			d := math.Sqrt(sq(float64(pts[i])-c) + sq(float64(pts[i+1])-c) + sq(float64(pts[i+2])-c))
			require.InDelta(t, r, d, 1e-4)
		}
	}
}

func sq(x float64) float64 { return x * x }

func TestMedianOf(t *testing.T) {
	require.Equal(t, 2.0, medianOf([]float64{3, 1, 2}))
	require.Equal(t, 2.5, medianOf([]float64{4, 1, 3, 2}))
	require.Equal(t, 0.0, medianOf(nil))
	require.Equal(t, 3.0, medianOf([]float64{3}))
	require.Equal(t, 3.0, medianOf([]float64{5, 1, 3}))
	in := []float64{4, 1, 3, 2}
	medianOf(in)
	require.Equal(t, []float64{4, 1, 3, 2}, in, "medianOf leaves its input alone")
}

func TestRatioTicks(t *testing.T) {
	cases := []struct {
		lo, hi float64
		want   []string
	}{
		{0, 2.6, []string{"0", "1", "2"}},
		{0, 2.4, []string{"0", "0.5", "1", "1.5", "2"}},
		{0, 4.4, []string{"0", "1", "2", "3", "4"}},
		{0, 1.1, []string{"0", "0.25", "0.5", "0.75", "1"}},
		{0, 6.9, []string{"0", "2", "4", "6"}},
		{0, 30, []string{"0", "10", "20", "30"}},
		{0, 14, []string{"0", "5", "10"}},
		{0, 260, []string{"0", "100", "200"}},
		{0.3, 1.2, []string{"0.5", "0.75", "1"}},
		{1, 1, nil},
		{2, 1, nil},
	}
	for _, c := range cases {
		var got []string
		for _, tk := range (ratioTicks{}).Ticks(c.lo, c.hi) {
			require.NotEmpty(t, tk.Label, "every tick is a major tick")
			got = append(got, tk.Label)
		}
		require.Equal(t, c.want, got, "ticks of [%g, %g]", c.lo, c.hi)
	}
}

// npyBytes writes a C-order .npy file of the given dtype and shape.
func npyBytes(t *testing.T, descr string, shape []int, data any) []byte {
	t.Helper()
	dims := make([]string, len(shape))
	for i, d := range shape {
		dims[i] = fmt.Sprint(d)
	}
	header := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, strings.Join(dims, ", "))
	pad := 64 - (10+len(header)+1)%64
	header += strings.Repeat(" ", pad%64) + "\n"
	var buf bytes.Buffer
	buf.WriteString("\x93NUMPY\x01\x00")
	require.NoError(t, binary.Write(&buf, binary.LittleEndian, uint16(len(header))))
	buf.WriteString(header)
	require.NoError(t, binary.Write(&buf, binary.LittleEndian, data))
	return buf.Bytes()
}

func TestReadCoords(t *testing.T) {
	want := []int32{0, 1, 2, 3, 1, 4, 0, 2, 0, 0, 0, 0}
	got, err := readCoordsNpy(bytes.NewReader(npyBytes(t, "<i4", []int{3, 4}, want)))
	require.NoError(t, err)
	require.Equal(t, want, got)

	wide := []int64{0, 1, 2, 3, 1, 4, 0, 2, 0, 0, 0, 0}
	got, err = readCoordsNpy(bytes.NewReader(npyBytes(t, "<i8", []int{3, 4}, wide)))
	require.NoError(t, err)
	require.Equal(t, want, got)

	_, err = readCoordsNpy(bytes.NewReader(npyBytes(t, "<i4", []int{4, 3}, want)))
	require.ErrorContains(t, err, "shape")
	_, err = readCoordsNpy(bytes.NewReader(npyBytes(t, "<f4", []int{3, 4}, make([]float32, 12))))
	require.ErrorContains(t, err, "dtype")
	_, err = readCoordsNpy(bytes.NewReader(npyBytes(t, "<i8", []int{1, 4}, []int64{0, 1 << 40, 0, 0})))
	require.ErrorContains(t, err, "int32")
	_, err = readCoordsNpy(strings.NewReader("not npy"))
	require.Error(t, err)

	dir := t.TempDir()
	path := filepath.Join(dir, "c.npy")
	require.NoError(t, os.WriteFile(path, npyBytes(t, "<i4", []int{3, 4}, want), 0o644))
	sc, err := fileScene(path)
	require.NoError(t, err)
	require.Equal(t, 2, sc.ext.Batch)
	require.Equal(t, [3]int{5, 3, 4}, [3]int{sc.ext.X, sc.ext.Y, sc.ext.Z})
	require.Equal(t, 5, sc.res)
	require.Equal(t, path, sc.source)
	neg := filepath.Join(dir, "neg.npy")
	require.NoError(t, os.WriteFile(neg, npyBytes(t, "<i4", []int{1, 4}, []int32{0, -1, 0, 0}), 0o644))
	_, err = fileScene(neg)
	require.ErrorContains(t, err, "negative")
}

// hostEngine reports whether an engine computes on host float32 data.
func hostEngine() bool {
	_, err := sparse.EngineFor(sparse.Matrix{Rows: 1, Cols: 1, Data: []float32{0}})
	return err == nil
}

func TestRunBenchSmoke(t *testing.T) {
	if !hostEngine() {
		t.Skip("no engine for host data is registered in this build")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "r.jsonl")
	var stdout, stderr bytes.Buffer
	code := runMain([]string{"-cfgs", "8,4,2", "-dtypes", "fp32,fp64", "-iters", "1", "-repeats", "3", "-warmup", "1",
		"-algo", "auto,masked_implicit_gemm_splitk", "-o", out, "-commit", "test"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	recs, err := readRecords(bytes.NewReader(stdout.Bytes()), "stdout")
	require.NoError(t, err)
	require.Len(t, recs, 2*2*2)
	fromFile, err := os.ReadFile(out)
	require.NoError(t, err)
	again, err := readRecords(bytes.NewReader(fromFile), out)
	require.NoError(t, err)
	require.Equal(t, recs, again)
	for _, r := range recs {
		require.Equal(t, "flexgemm-go", r.Impl)
		require.Equal(t, 192, r.N)
		require.Equal(t, int64(2544), r.Pairs)
		require.Equal(t, "test", r.Commit)
		require.True(t, strings.HasPrefix(r.Device, "cpu: "))
		require.Equal(t, kmapCPU, r.Kmap)
		require.Nil(t, r.PctPeak, "no tensor-core rate on the CPU")
		require.Empty(t, r.Error)
		require.Len(t, r.MSAll, 3)
		require.Equal(t, 1, r.Iters)
		require.NotNil(t, r.PeakMemGB)
	}
	require.Contains(t, stdout.String(), "| subm_conv | train | fp64 | masked_implicit_gemm_splitk | cpu | 8,4,2 | 192 | 2544 |")

	// Grid sample runs once whatever the algorithms, with L = 1.
	stdout.Reset()
	code = runMain([]string{"-op", "grid_sample", "-cfgs", "8,4,2;8,4,3", "-iters", "1", "-repeats", "1", "-warmup", "0",
		"-algo", "all", "-memsample=false"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	recs, err = readRecords(bytes.NewReader(stdout.Bytes()), "stdout")
	require.NoError(t, err)
	require.Len(t, recs, 2)
	for _, r := range recs {
		require.Equal(t, opSample, r.Op)
		require.Equal(t, "trilinear", r.Algo)
		require.Equal(t, 1, r.L)
		require.Nil(t, r.PeakMemGB)
		require.Greater(t, r.Pairs, int64(0))
	}
}

// TestCommitID checks the order of the commit sources: the flag, then the
// commit the build scripts stamp, then Go's VCS stamp or git.
func TestCommitID(t *testing.T) {
	old := buildCommit
	t.Cleanup(func() { buildCommit = old })
	buildCommit = "abc123def456"
	require.Equal(t, "given", commitID("given"))
	require.Equal(t, "abc123def456", commitID(""))
	var out, errb bytes.Buffer
	require.Equal(t, 0, runMain([]string{"version"}, &out, &errb), errb.String())
	require.Equal(t, "abc123def456\n", out.String(), "bench version prints the stamped commit")
	buildCommit = ""
	require.NotEmpty(t, commitID(""))
}

// paddingTable runs `bench padding` with args, requires success and
// resolutions results rows of cols cells, and returns the table's header
// line and the cells of its rows (trimmed).
func paddingTable(t *testing.T, results, cols int, args ...string) (header string, rows [][]string) {
	t.Helper()
	var out, errb bytes.Buffer
	require.Equal(t, 0, runMain(append([]string{"padding"}, args...), &out, &errb), errb.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2+results, out.String())
	for _, l := range lines[2:] {
		cells := strings.Split(strings.Trim(l, "| "), "|")
		require.Len(t, cells, cols, l)
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, cells)
	}
	return lines[0], rows
}

// factorCell parses a table cell such as "1.68×".
func factorCell(t *testing.T, cell string) float64 {
	t.Helper()
	var v float64
	_, err := fmt.Sscanf(cell, "%f×", &v)
	require.NoError(t, err, "cell %q", cell)
	return v
}

// TestPaddingRegroupColumns checks the -regroup columns of `bench
// padding`: a regrouped padding of at least 1 and at most the Gray order's.
func TestPaddingRegroupColumns(t *testing.T) {
	header, rows := paddingTable(t, 1, 7, "-res", "16", "-rows", "64", "-regroup", "256")
	require.Contains(t, header, "regrouped BM 64")
	gray, regrouped := factorCell(t, rows[0][4]), factorCell(t, rows[0][6])
	require.GreaterOrEqual(t, regrouped, 1.0)
	require.LessOrEqual(t, regrouped, gray)
	var out, errb bytes.Buffer
	require.NotEqual(t, 0, runMain([]string{"padding", "-regroup", "-1"}, &out, &errb))
	errb.Reset()
	require.NotEqual(t, 0, runMain([]string{"padding", "-regroup", "256", "-fullfirst"}, &out, &errb))
	require.Contains(t, errb.String(), "-fullfirst needs")
	// The windowed greedies, whole class tiles first or not, each at most
	// the Gray order's padding.
	for _, extra := range [][]string{nil, {"-fullfirst"}} {
		header, rows := paddingTable(t, 1, 8, append([]string{"-res", "16", "-rows", "64", "-regroup", "256", "-windows"}, extra...)...)
		require.Contains(t, header, "windows of 256 BM 64")
		gray, regrouped := factorCell(t, rows[0][4]), factorCell(t, rows[0][6])
		require.GreaterOrEqual(t, regrouped, 1.0)
		require.LessOrEqual(t, regrouped, gray)
	}
}

// TestPaddingWgradColumns checks the -wgrad columns of `bench padding`:
// the slab products (≥ 1× the pairs), then per tap group the rows read
// relative to the pairs kernels — (1 + products) / 2 for one tap, fewer for
// larger groups — and that bad groups and slab heights are errors.
func TestPaddingWgradColumns(t *testing.T) {
	header, rows := paddingTable(t, 1, 9, "-res", "16", "-rows", "64", "-wgrad", "1,9", "-wgradrows", "32")
	require.Contains(t, header, "wgrad products, 32-row slabs")
	require.Contains(t, header, "wgrad rows read, 9-tap groups")
	products, one, nine := factorCell(t, rows[0][6]), factorCell(t, rows[0][7]), factorCell(t, rows[0][8])
	require.GreaterOrEqual(t, products, 1.0)
	require.InDelta(t, (1+products)/2, one, 0.01)
	require.Less(t, nine, one)
	var out, errb bytes.Buffer
	for _, bad := range [][]string{{"padding", "-wgrad", "0"}, {"padding", "-wgrad", "4", "-wgradrows", "0"}} {
		errb.Reset()
		require.Equal(t, 1, runMain(bad, &out, &errb), "%v", bad)
		require.Contains(t, errb.String(), "bench:")
	}
}

// TestPaddingGrayDropColumns checks the -graydrop columns of `bench
// padding`: the Gray order sorted by fewer rank bits pads at least as much
// as the whole rank's order on the RES 16 shell, more bits dropped no less,
// and a bad list is an error.
func TestPaddingGrayDropColumns(t *testing.T) {
	header, rows := paddingTable(t, 1, 8, "-res", "16", "-rows", "64", "-graydrop", "5,27")
	require.Contains(t, header, "Gray without 5 low rank bits, padding BM 64")
	gray, five, all := factorCell(t, rows[0][4]), factorCell(t, rows[0][6]), factorCell(t, rows[0][7])
	require.GreaterOrEqual(t, five, gray)
	require.GreaterOrEqual(t, all, five)
	var out, errb bytes.Buffer
	require.Equal(t, 1, runMain([]string{"padding", "-graydrop", "x"}, &out, &errb))
	require.Contains(t, errb.String(), "-graydrop")
}

// TestPaddingHaloColumns checks the -halo columns of `bench padding`: the
// z-order's padding (≥ 1), and the rows read per pair of tiles in Gray
// order (at most 1) and in z-order (fewer).
func TestPaddingHaloColumns(t *testing.T) {
	header, rows := paddingTable(t, 1, 9, "-res", "16", "-rows", "64", "-halo")
	require.Contains(t, header, "z-order padding BM 64")
	require.Contains(t, header, "z-order rows read BM 64")
	padding := factorCell(t, rows[0][6])
	var gray, z float64
	_, err := fmt.Sscanf(rows[0][7]+" "+rows[0][8], "%f %f", &gray, &z)
	require.NoError(t, err)
	require.GreaterOrEqual(t, padding, 1.0)
	require.LessOrEqual(t, gray, 1.0)
	require.Less(t, z, gray)
}

// TestPaddingHalvesColumns checks the -halves columns of `bench padding`:
// the halves' balance (in (½, 1], higher with more taps resident in both
// halves) and, with -bytes, the rows' gigabytes (today's rows without the
// weights); a bad tap list is an error.
func TestPaddingHalvesColumns(t *testing.T) {
	balance := func(taps string) float64 {
		header, rows := paddingTable(t, 1, 13, "-res", "16", "-rows", "64", "-bytes", "1024", "-halves", taps)
		require.Contains(t, header, "halves' balance BM 64")
		var b float64
		_, err := fmt.Sscanf(rows[0][11], "%f", &b)
		require.NoError(t, err)
		require.Greater(t, b, 0.5)
		require.LessOrEqual(t, b, 1.0)
		// The Gray tiles' rows + weights (after the map's four columns and
		// the two paddings), then the resident design's rows.
		var rowsGB, weightsGB, resident float64
		_, err = fmt.Sscanf(rows[0][6]+" "+rows[0][12], "%f + %f %f", &rowsGB, &weightsGB, &resident)
		require.NoError(t, err)
		require.Positive(t, rowsGB)
		require.InDelta(t, rowsGB, resident, 0.005)
		return b
	}
	require.GreaterOrEqual(t, balance("13,4,10,12,14,16,22"), balance("13"))
	var out, errb bytes.Buffer
	require.Equal(t, 1, runMain([]string{"padding", "-halves", "x"}, &out, &errb))
	require.Contains(t, errb.String(), "-halves")
}

// TestPaddingGrayWindowsColumns checks the -graywindows columns of `bench
// padding`: a window of at least the map's rows gives the Gray order's
// padding, a small window at least 1×, and the modelled DRAM gigabytes
// fall with a larger cache; bad windows, waves and caches are errors.
func TestPaddingGrayWindowsColumns(t *testing.T) {
	cells := func(cacheMB string) (gray, small, whole string, smallGB, wholeGB float64) {
		header, rows := paddingTable(t, 1, 15, "-res", "48", "-rows", "64", "-bytes", "1024", "-graywindows", "64,1000000",
			"-wavetiles", "2", "-cachemb", cacheMB)
		require.Contains(t, header, "Gray in windows of 64, padding BM 64")
		require.Contains(t, header, "GB from DRAM, windows of 1000000, BM 64")
		r := rows[0]
		_, err := fmt.Sscanf(r[12]+" "+r[14], "%f %f", &smallGB, &wholeGB)
		require.NoError(t, err)
		return r[4], r[11], r[13], smallGB, wholeGB
	}
	gray, small, whole, _, noCache := cells("0")
	require.Equal(t, gray, whole, "a window of every row is the Gray order")
	require.GreaterOrEqual(t, factorCell(t, small), 1.0)
	_, _, _, _, cached := cells("40")
	require.Positive(t, cached)
	require.Less(t, cached, noCache)
	var out, errb bytes.Buffer
	for _, bad := range [][]string{{"padding", "-graywindows", "x"}, {"padding", "-graywindows", "64", "-wavetiles", "0"},
		{"padding", "-graywindows", "64", "-cachemb", "-1"}} {
		errb.Reset()
		require.Equal(t, 1, runMain(bad, &out, &errb), "%v", bad)
		require.Contains(t, errb.String(), "bench:")
	}
}

// TestPaddingCommand runs `bench padding` on small shells: one row per
// resolution, the map's voxel and pair counts, and per tile height the
// Gray order's padding and the engines' (≥ 1, growing with the tile
// height, the engines' at most the Gray order's); bad lists are errors.
func TestPaddingCommand(t *testing.T) {
	header, rows := paddingTable(t, 2, 8, "-res", "8,16", "-rows", "64,256")
	require.Contains(t, header, "Gray order padding BM 64")
	require.Contains(t, header, "padding BM 256")
	for i, res := range []int{8, 16} {
		m := mustShellMap(t, res)
		st := m.Stats(0)
		cells := rows[i]
		require.Equal(t, fmt.Sprint(res), cells[0])
		require.Equal(t, fmt.Sprint(st.NOut), cells[1])
		require.Equal(t, fmt.Sprint(st.Pairs), cells[2])
		g64, g256 := factorCell(t, cells[4]), factorCell(t, cells[5])
		p64, p256 := factorCell(t, cells[6]), factorCell(t, cells[7])
		require.GreaterOrEqual(t, p64, 1.0)
		require.GreaterOrEqual(t, p256, p64)
		require.GreaterOrEqual(t, g256, g64)
		require.LessOrEqual(t, p64, g64)
		require.InDelta(t, m.Stats(64).Padding, p64, 0.005)
	}
	var out, errb bytes.Buffer
	for _, bad := range [][]string{{"padding", "-res", "0"}, {"padding", "-rows", "x"}, {"padding", "-res", ""}} {
		errb.Reset()
		require.Equal(t, 1, runMain(bad, &out, &errb), "%v", bad)
		require.Contains(t, errb.String(), "bench:")
	}
}

func TestRatioLabel(t *testing.T) {
	for _, tc := range []struct {
		v, target float64
		want      string
	}{
		{1.497, 1.5, "1.497×"},
		{1.5049, 1.5, "1.505×"},
		{1.514, 1.5, "1.51×"},
		{3.726, 1.5, "3.73×"},
		{1.497, 0, "1.50×"}, // no target line
	} {
		require.Equal(t, tc.want, ratioLabel(tc.v, tc.target), "%v against %v", tc.v, tc.target)
	}
}

// TestConvStackBackwardOrders runs one training step of three layers on the
// CPU in both orders of -backward: the weight and bias gradients agree bit
// for bit (each is one call on the same operands), and every intermediate
// activation and gradient the step made is freed exactly once.
func TestConvStackBackwardOrders(t *testing.T) {
	coords, ext := synth.SphereShell(8, 1)
	m, err := kmap.NewSubmanifold(coords, ext, kernel3, dilation1)
	require.NoError(t, err)
	dt := deviceDTypes[deviceCPU]["fp32"]
	const C, L = 4, 3
	maps := []*kmap.Map{m, m, m}
	run := func(paramsFirst bool) (kept []sparse.Matrix, freed map[*float32]int) {
		be := cpuBackend()
		freed = map[*float32]int{}
		be.free = func(ms ...sparse.Matrix) {
			for _, x := range ms {
				if d, ok := x.Data.([]float32); ok && len(d) > 0 {
					freed[&d[0]]++
				}
			}
		}
		h := &holder{be: be}
		rng := rand.New(rand.NewPCG(1, 2))
		x, err := h.random(dt, m.NIn, C, normal(rng, 1))
		require.NoError(t, err)
		ws, bs, err := layerParams(h, params{C: C, L: L, dtype: dt}, 27, rng)
		require.NoError(t, err)
		ones := func(h *holder) (sparse.Matrix, error) { return h.filled(dt, m.NOut, C, 1) }
		n := len(h.made)
		require.NoError(t, convStack(h, maps, x, ws, bs, ones, sparse.ConvOptions{Algorithm: sparse.Implicit}, true, paramsFirst))
		return h.made[n:], freed
	}
	keptP, freedP := run(true)
	keptI, freedI := run(false)
	// The output, the all-ones gradient, then dw and db of layers 2, 1, 0.
	require.Len(t, keptI, 2+2*L)
	require.Len(t, keptP, len(keptI))
	for i := range keptI {
		require.Equal(t, keptP[i].Data, keptI[i].Data, "kept matrix %d", i)
	}
	// Freed: the activations of layers 1 and 2 and the input gradients of
	// layers 2 and 1 (the last one at return), each once.
	for _, freed := range []map[*float32]int{freedP, freedI} {
		require.Len(t, freed, 2*(L-1))
		for _, n := range freed {
			require.Equal(t, 1, n)
		}
	}
}
