// Command gen writes the GEMM instantiation files gemm_<family>_<math>.cu
// and gemm_gather_<math>_sm90a.cu (Hopper tiles)
// of package kernels from its tile table (tiles.go). build.sh runs it
// before compiling; TestInstancesUpToDate fails when its output drifts
// from the files on disk.
//
// Usage (from the repository root):
//
//	go run ./cudaext/kernels/gen [-dir cudaext/kernels]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
)

func main() {
	dir := flag.String("dir", "cudaext/kernels", "directory of the kernel sources")
	flag.Parse()
	for _, f := range kernels.Families {
		for _, m := range kernels.Maths {
			for _, t := range kernels.Tiles {
				if !t.Supports(m) {
					continue
				}
				if err := t.Validate(m); err != nil {
					fmt.Fprintln(os.Stderr, "gen:", err)
					os.Exit(1)
				}
			}
			path := filepath.Join(*dir, kernels.InstanceFile(f, m))
			if err := os.WriteFile(path, kernels.GenerateInstances(f, m), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, "gen:", err)
				os.Exit(1)
			}
		}
	}
	for _, m := range kernels.HopperMaths() {
		for _, t := range kernels.HopperTiles {
			if t.Supports(m) {
				if err := t.Validate(m); err != nil {
					fmt.Fprintln(os.Stderr, "gen:", err)
					os.Exit(1)
				}
			}
		}
		path := filepath.Join(*dir, kernels.HopperInstanceFile(m))
		if err := os.WriteFile(path, kernels.GenerateHopperInstances(m), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
}
