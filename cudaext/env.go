package cudaext

// Engine settings read from the environment when an engine opens. They
// are parsed here, in files without the cudaext build tag, so their tests
// run without a GPU.

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/flexgemm-go/flexgemm/cudaext/kernels"
)

// EnvBrickMinRows names the environment variable that, read when the
// engine opens, sets the fewest rows from which submanifold maps take the
// brick search (a non-negative integer; default brickMinRows).
const EnvBrickMinRows = "FLEXGEMM_BRICK_MIN_ROWS"

// brickMinRowsFromEnv returns EnvBrickMinRows's value, or brickMinRows
// when it is unset; anything but a non-negative integer is an error.
func brickMinRowsFromEnv() (int, error) {
	v, ok := os.LookupEnv(EnvBrickMinRows)
	if !ok || v == "" {
		return brickMinRows, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cudaext: %s=%q: want a non-negative number of rows", EnvBrickMinRows, v)
	}
	return n, nil
}

// brickMinRows is the fewest rows for which the engine takes the brick
// search. Measured (H200, session 8, map phase of an inference step,
// FLEXGEMM_BRICK_MIN_ROWS=0 against the per-tap search, calls 5 and 6):
// RES 512 (1.0 M rows) 0.367 → 0.209 ms, RES 256 (252 K) 0.127 → 0.101;
// in session 8's call 1 (brick kernels before the warp-grouped insert and
// the looping neighbour kernel) RES 128 (64 K) 0.075 → 0.090 and RES 64
// (15 K) 0.092 → 0.112: below about a hundred thousand rows the host wait
// and the extra launches cost more than the shorter lookups save.
const brickMinRows = 1 << 17

// EnvSpecializedGathers names the environment variable that, read when an
// engine opens, turns the fixed heuristic's warp-specialised gather tiles
// (kernels.Tile.Producers) on ("1") or off ("0"); unset, they are on.
const EnvSpecializedGathers = "FLEXGEMM_SPECIALIZED_GATHERS"

// specializedGathersFromEnv returns EnvSpecializedGathers's setting: true
// when unset, empty or "1", false for "0", an error naming the variable
// otherwise.
func specializedGathersFromEnv() (bool, error) {
	switch v := os.Getenv(EnvSpecializedGathers); v {
	case "", "1":
		return true, nil
	case "0":
		return false, nil
	default:
		return false, fmt.Errorf("cudaext: %s=%q: want 0 or 1", EnvSpecializedGathers, v)
	}
}

// EnvTapWeightGrad names the environment variable that, read when an
// engine opens, sets how the fixed heuristic computes the weight gradient
// of layers with at most kernels.TapGradMaxChannels input and output
// channels on Hopper GPUs: "0" over the pair lists (the pairs family);
// unset, empty or "1" by the multi-tap kernel (tapgrad.cuh) with the
// defaults; otherwise a comma-separated list of "gray" (rows in the
// masked algorithms' Gray order), "rows" (stored order), "winN" (the
// Gray order within windows of 2^N stored rows, 4 ≤ N ≤ 30) and a
// configuration name (kernels.TapGrad.String, e.g. "k32w3t3s4").
const EnvTapWeightGrad = "FLEXGEMM_TAP_WGRAD"

// tapOrder is the row order of the multi-tap weight gradient.
type tapOrder int

const (
	tapOrderWindow tapOrder = iota // Gray order within windows of stored rows
	tapOrderGray                   // the masked algorithms' Gray order
	tapOrderRows                   // stored order
)

// tapWGradSetting is the parsed EnvTapWeightGrad.
type tapWGradSetting struct {
	on         bool
	order      tapOrder
	windowBits int             // tapOrderWindow: windows of 2^windowBits rows
	cfg        kernels.TapGrad // configuration; zero = the default
}

// defaultTapWindowBits is the window of the default row order of the
// multi-tap weight gradient.
const defaultTapWindowBits = 12

// tapWGradFromEnv parses EnvTapWeightGrad; anything else than the values
// it lists is an error naming the variable.
func tapWGradFromEnv() (tapWGradSetting, error) {
	v := os.Getenv(EnvTapWeightGrad)
	s := tapWGradSetting{on: true, order: tapOrderWindow, windowBits: defaultTapWindowBits}
	switch v {
	case "", "1":
		return s, nil
	case "0":
		return tapWGradSetting{}, nil
	}
	for _, f := range strings.Split(v, ",") {
		switch {
		case f == "gray":
			s.order = tapOrderGray
		case f == "rows":
			s.order = tapOrderRows
		case strings.HasPrefix(f, "win"):
			n, err := strconv.Atoi(f[3:])
			if err != nil || n < 4 || n > 30 {
				return tapWGradSetting{}, fmt.Errorf("cudaext: %s=%q: %q: want win4 … win30", EnvTapWeightGrad, v, f)
			}
			s.order, s.windowBits = tapOrderWindow, n
		default:
			c, err := kernels.ParseTapGrad(f)
			if err != nil {
				return tapWGradSetting{}, fmt.Errorf("cudaext: %s=%q: want 0, 1 or a list of gray, rows, winN and a configuration: %v", EnvTapWeightGrad, v, err)
			}
			s.cfg = c
		}
	}
	return s, nil
}
