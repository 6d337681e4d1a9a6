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
			write(filepath.Join(*dir, kernels.InstanceFile(f, m)), kernels.Tiles, m, kernels.GenerateInstances(f, m))
		}
	}
	for _, m := range kernels.HopperMaths() {
		write(filepath.Join(*dir, kernels.HopperInstanceFile(m)), kernels.HopperTiles, m, kernels.GenerateHopperInstances(m))
	}
}

// write validates the tiles of table that arithmetic m is instantiated
// for, then writes the instantiation file content to path; it exits on
// the first error.
func write(path string, table []kernels.Tile, m kernels.Math, content []byte) {
	for _, t := range table {
		if !t.Supports(m) {
			continue
		}
		if err := t.Validate(m); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
