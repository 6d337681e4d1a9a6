// Command bench times FlexGEMM-Go the way FlexGEMM times itself and
// compares the two.
//
// # Running
//
//	go run ./bench [flags]                     # measure; JSON lines on stdout
//	go run ./bench -o bench/results/x.jsonl    # … and append them to a file
//	go run ./bench compare [-readme] [-png r.png [-target 1.5]] ours.jsonl flexgemm.jsonl
//	go build -tags cudaext -o .gpu/bench ./bench && .gpu/bench -device cuda
//	bash bench/gpu_run.sh build   # here; then on the GPU machine:
//	bash bench/gpu_run.sh         # ours and FlexGEMM side by side, ratio table last
//	go run ./bench version        # the commit the records of this binary carry
//	bash bench/ab_run.sh ab.jsonl 'FLAGS' NAME=SPEC …  # variants (env KEY=VALUE
//	                              # words, flags, BIN=PATH for another build),
//	                              # alternated rounds
//	go run ./bench ab [-base NAME] ab.jsonl  # their rounds, medians and changes
//	.gpu/bench tune [-res 64,128,256] [-c 16,…] [-o autotune/pretuned/h200.json]
//	                              # offline autotuning of a shell grid (GPU build)
//	go run ./bench padding [-res 8,…,1024] [-rows 64,128,256] [-regroup W [-windows [-fullfirst]]] [-merge] [-halo]
//	                       [-bytes C] [-wgrad G,…] [-halves V,…]
//	                       [-graywindows W,… [-wavetiles T] [-cachemb M]] [-sparsetaps F,…] [-graydrop K,…]
//	                              # masked-GEMM padding of the benchmark shells, and the
//	                              # rows and bytes a gather reads per tile order (CPU)
//	go run ./bench timeline stderr.txt   # where one block's stage hand-overs spend their
//	                              # cycles: the stamps of a run on FG_TIMELINE images
//	                              # (cudaext/kernels/ceiling.sh, FLEXGEMM_KERNEL_IMAGE)
//	go run ./bench pairsched [-res 256] [-splits 18 | -balanced C] [-tiles 2] [-groups 1,2,…]
//	                              # a model of the weight gradient's window-split launch:
//	                              # its blocks' makespan in launch order and reordered (CPU)
//
// The default workload is FlexGEMM's submanifold training benchmark
// (tests/submconv/train_benchmark.py, and the anchor script
// flexgemm_bench.py): sphere-shell voxels (synth.SphereShell), L stacked
// C→C 3×3×3 submanifold convolutions with bias, the kernel map rebuilt
// inside every step, then
//
//	train: forward through L layers, backward with an all-ones upstream
//	       gradient made in the step, as the anchor's torch.ones_like(h)
//	       (weight and bias gradients of every layer, input gradients of
//	       layers 1…L−1: the input features need no gradient; within a
//	       layer the input gradient first, as FlexGEMM's backward,
//	       unless -backward params-first);
//	infer: forward only.
//
// subm_conv also has two parts of the inference step as modes of their
// own, for -power to split an inference step's energy (no anchor rows):
//
//	map:         the step's kernel-map build and derived tables alone
//	             (built, derived and released every step; tflops 0);
//	infer_nomap: the step's L convolutions over one map built and
//	             derived before the timing and kept until the workload's
//	             last mode (so list it last).
//
// Each (workload, config, dtype, algorithm, mode) runs 2 warm-up steps and
// 3 repeats of K steps; the median repeat is reported as ms per step.
// -op adds the strided (kernel 2, stride 2) convolution stack and
// FlexGEMM's grid-sample benchmark (CPU only).
//
// # On the GPU
//
// A bench built with the build tag cudaext has -device cuda: the same
// workloads on the CUDA engine (cudaext), following the anchor's protocol.
// Features, weights, biases and the all-ones gradient live on the device
// (fp16 and bf16 are generated as float32 and rounded on upload; tf32 is
// float32 with the engine's tf32 tensor cores; fp32 is IEEE float32;
// -dtypes defaults to fp16 there). The kernel map is rebuilt inside every
// timed step: with -kmap gpu (the default) by the engine's device builders
// (SubmanifoldMap, StridedMap) from coordinates uploaded once, with the
// derived tables the step reads (masks with Gray order, pair lists)
// derived on the device (DeriveTables); with -kmap cpu on the host, the
// engine uploading what it needs. Record.Kmap says which ("gpu" or
// "cpu+upload"). Every repeat is timed with CUDA events on the engine's
// stream (2 warm-ups, 3 repeats of 20 steps unless -iters says otherwise,
// median); peak_mem_gb is the engine allocator's peak of live buffers
// after a reset that follows the warm-ups (like torch's
// max_memory_allocated after reset_peak_memory_stats), with intermediate
// activations and gradients freed when the anchor's autograd frees them
// (convStack); pct_of_peak is
// tflops as a percentage of 790 TFLOP/s on an H200 (-peaktflops for
// others). A measurement that fails, out of device memory say, is written
// as a record with an error field and the run goes on (exit status 1 at
// the end). bench/gpu_run.sh runs ours and the anchor script in one call
// on the GPU machine and prints the ratio table last. With -power every
// record gets a power field, read through NVML over the timed repeats:
// the mean board power and energy per step (between the first and last
// updates of the GPU's energy counter, which moves about every 100 ms, so
// short runs get none: raise -iters) and the SM clock sampled every 5 ms
// (mean, lowest, share of samples held by the software power cap). The
// anchor's side of the same reading comes from bench/anchor_power.py,
// which runs the unchanged anchor script under nvidia-smi sampling and adds
// the same power field to its records (CFGS='256,256,2' python3
// bench/anchor_power.py .anchor OUT.jsonl fp16, on the GPU machine).
// With -phases, -phasesteps more steps run after each timed record under
// the engine's profiler (every launch between CUDA events, without
// programmatic dependent launch), and the record's phases field holds per
// phase (map, derive, fwd Lk, wgrad Lk, dgrad Lk, …) the device span, the
// kernel time, the gap (span − kernels: idle, memsets, copies), the host
// time and the slowest kernels. Each profiled step waits for the device
// at its end, so its first launches meet an idle device; -phaseschain runs
// the steps back to back in one profile instead, as timed steps run, so
// the gaps are what a timed step leaves idle.
//
// # Output
//
// One JSON object per line with the anchor's field names (impl, algo, mode,
// dtype, RES, C, L, N, pairs, ms, ms_all, tflops, peak_mem_gb, warmup_s)
// plus op, flops, iters, device, kmap, commit and a few more (see Record). tflops
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
// as a markdown table; -png draws the ratios as a bar chart, each bar
// labelled with its ratio, with a dashed line at 1 and, with -target, one
// at a goal (bench/gpu_run.sh draws 1.5); a panel whose tallest bar stands
// more than 3× above its median has its axis cut, the cut bars labelled
// with their full ratio. With -readme it prints instead the README's
// performance table (ours, -impl flexgemm-go, against the baseline: ms,
// ratio, useful TFLOP/s, % of 790, peak memory; training then inference,
// fp16, bf16, tf32, by RES) and each mode and dtype's geometric mean of
// the ratios; a test checks that the README's table is this output for
// the records its command line names. Compare
// numbers measured in one run on one machine only.
package main
