package cudaext

// Engine settings read from the environment when an engine opens. They
// are parsed here, in files without the cudaext build tag, so their tests
// run without a GPU.

import (
	"fmt"
	"os"
	"strconv"
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
