//go:build cudaext

package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/flexgemm-go/flexgemm/autotune"
	"github.com/flexgemm-go/flexgemm/cudaext"
	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
)

// tuneMain is `bench tune`: offline autotuning of a grid of sphere-shell
// convolution problems on the GPU, written as a pre-tuned table (by default
// autotune/pretuned/h200.json) that the module embeds.
func tuneMain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench tune", flag.ContinueOnError)
	fs.SetOutput(stderr)
	res := fs.String("res", "64,128,256", "sphere-shell resolutions")
	chans := fs.String("c", "16,32,64,128,256", "channel counts (Ci = Co)")
	maths := fs.String("dtypes", "fp16,bf16,tf32,fp32", "arithmetics")
	budget := fs.Duration("budget", 5*time.Second, "measuring time per problem key")
	gpu := fs.Int("gpu", 0, "GPU ordinal")
	out := fs.String("o", "autotune/pretuned/h200.json", "pre-tuned table to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rs, err := parseInts(*res)
	if err != nil {
		return fmt.Errorf("-res: %w", err)
	}
	cs, err := parseInts(*chans)
	if err != nil {
		return fmt.Errorf("-c: %w", err)
	}
	var ms []kernels.Math
	for _, name := range parseList(*maths) {
		m, ok := map[string]kernels.Math{"fp32": kernels.F32, "tf32": kernels.TF32, "fp16": kernels.F16, "bf16": kernels.BF16}[name]
		if !ok {
			return fmt.Errorf("-dtypes: unknown arithmetic %q (want fp16, bf16, tf32, fp32)", name)
		}
		ms = append(ms, m)
	}
	e, err := cudaext.Open(*gpu)
	if err != nil {
		return err
	}
	problems, err := cudaext.ShellGrid(rs, cs, ms)
	if err != nil {
		return err
	}
	cache, err := autotune.Open(autotune.InMemory(), autotune.WithPretuned(nil))
	if err != nil {
		return err
	}
	start := time.Now()
	results, err := e.TuneGrid(problems, cudaext.GridOptions{
		Cache:  cache,
		Budget: *budget,
		Progress: func(r cudaext.TuneResult) {
			if r.Err != nil {
				fmt.Fprintf(stdout, "%-40s error: %v\n", r.Problem, r.Err)
				return
			}
			fmt.Fprintf(stdout, "%-40s %v  %v\n", r.Problem, r.Result.Choice, r.Wall.Round(time.Millisecond))
		},
	})
	if err != nil {
		return err
	}
	note := fmt.Sprintf("bench tune -res %s -c %s -dtypes %s -budget %v on %s, %s, %d keys in %v",
		*res, *chans, *maths, *budget, e.Name(), time.Now().UTC().Format("2006-01-02"), len(results), time.Since(start).Round(time.Second))
	if err := e.WritePretuned(cache, *out, note); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (%s)\n", *out, note)
	return nil
}
