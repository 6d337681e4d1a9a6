// Command bench times FlexGEMM-Go the way FlexGEMM times itself and
// compares the two.
//
// # Running
//
//	go run ./bench [flags]                     # measure; JSON lines on stdout
//	go run ./bench -o bench/results/x.jsonl    # … and append them to a file
//	go run ./bench compare [-png r.png] ours.jsonl flexgemm.jsonl
//
// The default workload is FlexGEMM's submanifold training benchmark
// (tests/submconv/train_benchmark.py, and the anchor script
// flexgemm_bench.py): sphere-shell voxels (synth.SphereShell), L stacked
// C→C 3×3×3 submanifold convolutions with bias, the kernel map rebuilt
// inside every step, then
//
//	train: forward through L layers, backward with an all-ones upstream
//	       gradient (weight and bias gradients of every layer, input
//	       gradients of layers 1…L−1: the input features need no gradient);
//	infer: forward only.
//
// Each (workload, config, dtype, algorithm, mode) runs 2 warm-up steps and
// 3 repeats of K steps; the median repeat is reported as ms per step.
// -op adds the strided (kernel 2, stride 2) convolution stack and
// FlexGEMM's grid-sample benchmark.
//
// # Output
//
// One JSON object per line with the anchor's field names (impl, algo, mode,
// dtype, RES, C, L, N, pairs, ms, ms_all, tflops, peak_mem_gb, warmup_s)
// plus op, flops, iters, device, commit and a few more (see Record). tflops
// counts useful FLOPs: 2·pairs·Ci·Co per layer and pass (train = 3 passes,
// as in the anchor, although layer 0 skips its input gradient). On the CPU
// peak_mem_gb is the largest Go heap (live and not yet swept objects)
// sampled every millisecond during the timed repeats, null with
// -memsample=false. A markdown summary table follows the JSON lines; a
// reader of the output keeps the lines that start with '{'.
//
// # Comparing
//
// compare reads any number of JSON-lines files, joins every record of a
// non-baseline implementation with the baseline's (default impl
// "flexgemm") record of the same op, mode, dtype, RES, C and L, and prints
// the speed ratio baseline ms / our ms (above 1: faster than the baseline)
// as a markdown table; -png draws the ratios as a bar chart. Compare
// numbers measured in one run on one machine only.
package main
