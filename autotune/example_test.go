package autotune_test

import (
	"fmt"
	"time"

	"github.com/flexgemm-go/flexgemm/autotune"
)

func ExampleBucket() {
	for _, n := range []int{0, 1, 192, 15192, 1 << 20} {
		fmt.Println(n, autotune.Bucket(n))
	}
	// Output:
	// 0 -1
	// 1 0
	// 192 7
	// 15192 13
	// 1048576 20
}

func ExampleTuner_Choose() {
	// A memory-only cache; a real program uses autotune.Open() to share
	// choices through the user's cache file.
	cache, err := autotune.Open(autotune.InMemory())
	if err != nil {
		panic(err)
	}
	tuner, err := autotune.NewTuner(cache, autotune.WithMode(autotune.On))
	if err != nil {
		panic(err)
	}
	key := autotune.Key{
		Device: autotune.Device{Name: "NVIDIA H200", SMs: 132, Major: 9},
		Op:     autotune.OpSubmConv, Dir: autotune.Fwd, DType: "fp16",
		V: 27, Ci: 64, Co: 64, LogN: autotune.Bucket(15192),
	}
	cands := []autotune.Candidate{
		{Algorithm: "implicit_gemm", Tile: "b64x64"},
		{Algorithm: "masked_implicit_gemm_splitk", Tile: "b128x64", SplitK: 2},
	}
	// run launches one candidate and returns its time; here a stand-in
	// for CUDA-event timing of a real kernel.
	run := func(c autotune.Candidate) (time.Duration, error) {
		if c.SplitK == 2 {
			return 80 * time.Microsecond, nil
		}
		return 120 * time.Microsecond, nil
	}
	r, err := tuner.Choose(key, cands, run)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Source, r.Choice.Candidate, r.Choice.Time)
	r, _ = tuner.Choose(key, cands, run)
	fmt.Println(r.Source, r.Choice.Candidate)
	// Output:
	// measured masked_implicit_gemm_splitk/b128x64/splitk=2 80µs
	// cache masked_implicit_gemm_splitk/b128x64/splitk=2
}

func ExampleOpen() {
	// Warnings about the cache file go to a function of your choice.
	cache, err := autotune.Open(autotune.InMemory(), autotune.WithWarn(func(err error) {
		fmt.Println("warning:", err)
	}))
	if err != nil {
		panic(err)
	}
	fmt.Printf("%q\n", cache.Path())
	// Output:
	// ""
}
