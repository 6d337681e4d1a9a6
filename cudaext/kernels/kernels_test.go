package kernels

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestImagesUpToDate fails when a kernel source (or build.sh) changed
// after the embedded images were built: run cudaext/kernels/build.sh.
func TestImagesUpToDate(t *testing.T) {
	entries, nvcc, flags, err := ParseManifest(Manifest())
	require.NoError(t, err)
	require.Contains(t, nvcc, "release", "manifest lacks the nvcc version")
	require.Contains(t, flags, "sm_90", "manifest lacks the build flags")

	want := map[string]string{}
	images := map[string]string{}
	cubinOf := map[string]string{} // Hopper module → sha256 of the PTX its cubin was compiled from
	kernelsOf := map[string]int{}
	for _, e := range entries {
		switch e.Kind {
		case "source":
			want[e.Name] = e.SHA256
		case "image":
			images[e.Name] = e.SHA256
		case "cubin":
			cubinOf[e.Name] = e.SHA256
		case "kernel":
			kernelsOf[e.Module]++
			mod, ok := KernelModule(e.Name)
			require.True(t, ok, e.Name)
			require.Equal(t, e.Module, mod)
		}
	}
	for name := range images {
		module := name
		for _, ext := range []string{".fatbin", ".ptx.gz", ".cubin.gz"} {
			module = strings.TrimSuffix(module, ext)
		}
		require.Positivef(t, kernelsOf[module], "manifest lists no kernels of %s", name)
	}
	// Hopper tiles: a gather kernel (no _wt twin) in the sm90a PTX module
	// of every arithmetic they serve, none elsewhere.
	for _, m := range Maths {
		for _, tile := range HopperTiles {
			mod, ok := KernelModule(KernelName(Gather, m, tile))
			if !tile.Supports(m) {
				require.Falsef(t, ok, "%s is instantiated but the tile does not serve %v", KernelName(Gather, m, tile), m)
				continue
			}
			require.Truef(t, ok, "%s missing from the manifest", KernelName(Gather, m, tile))
			require.Equal(t, strings.TrimSuffix(HopperInstanceFile(m), ".cu"), mod)
			mod, ok = KernelModule(TransposedName(m, tile))
			require.Equal(t, tile.HasTransposed(m), ok, TransposedName(m, tile))
			if ok {
				require.Equal(t, strings.TrimSuffix(HopperInstanceFile(m), ".cu"), mod)
			}
			mod, ok = KernelModule(KernelName(Pairs, m, tile))
			require.Equal(t, tile.Has(Pairs, m), ok, KernelName(Pairs, m, tile))
			if ok {
				require.Equal(t, strings.TrimSuffix(HopperInstanceFile(m), ".cu"), mod)
			}
		}
	}
	for _, f := range Families {
		for _, m := range Maths {
			for _, tile := range Tiles {
				if !tile.Supports(m) {
					_, ok := KernelModule(KernelName(f, m, tile))
					require.Falsef(t, ok, "%s is instantiated but the tile is 16-bit only", KernelName(f, m, tile))
					continue
				}
				mod, ok := KernelModule(KernelName(f, m, tile))
				require.Truef(t, ok, "%s missing from the manifest", KernelName(f, m, tile))
				require.Equal(t, strings.TrimSuffix(InstanceFile(f, m), ".cu"), mod)
				if f == Gather {
					mod, ok := KernelModule(TransposedName(m, tile))
					require.Truef(t, ok, "%s missing from the manifest", TransposedName(m, tile))
					require.Equal(t, strings.TrimSuffix(InstanceFile(f, m), ".cu"), mod)
				}
			}
		}
	}
	var sources []string
	for _, pat := range []string{"*.cu", "*.cuh", "build.sh"} {
		m, err := filepath.Glob(pat)
		require.NoError(t, err)
		sources = append(sources, m...)
	}
	sort.Strings(sources)
	require.NotEmpty(t, sources)
	for _, f := range sources {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		got, ok := want[f]
		require.Truef(t, ok, "%s is not in manifest.txt: run cudaext/kernels/build.sh", f)
		require.Equalf(t, got, sha(data), "%s changed since the images were built: run cudaext/kernels/build.sh", f)
		delete(want, f)
	}
	require.Emptyf(t, want, "manifest lists sources that no longer exist: run cudaext/kernels/build.sh")

	for _, f := range sources {
		if strings.HasSuffix(f, ".cu") {
			name := strings.TrimSuffix(f, ".cu") + ".fatbin"
			if strings.HasSuffix(f, "_sm90a.cu") {
				name = strings.TrimSuffix(f, ".cu") + ".ptx.gz"
				gz, err := imageFS.ReadFile("images/" + name)
				require.NoErrorf(t, err, "no embedded image for %s: run cudaext/kernels/build.sh", f)
				data, err := gunzip(gz)
				require.NoError(t, err, name)
				require.Containsf(t, string(data), "\n.target sm_90a\n", "%s is not retargeted to sm_90a", name)
				require.Containsf(t, string(data), "\n.version 8.0\n", "%s is not PTX ISA 8.0", name)
				// The sm_90a cubin that Images returns instead: compiled
				// from this PTX (its cubin line), an ELF image.
				module := strings.TrimSuffix(f, ".cu")
				require.Equalf(t, sha(gz), cubinOf[module], "the cubin of %s was not compiled from the embedded PTX: run cudaext/kernels/build.sh", module)
				delete(cubinOf, module)
				cubin := module + ".cubin.gz"
				gzc, err := imageFS.ReadFile("images/" + cubin)
				require.NoErrorf(t, err, "no embedded cubin for %s: run cudaext/kernels/build.sh", f)
				require.Equalf(t, images[cubin], sha(gzc), "embedded %s differs from the manifest", cubin)
				delete(images, cubin)
				elf, err := gunzip(gzc)
				require.NoError(t, err, cubin)
				require.Truef(t, bytes.HasPrefix(elf, []byte("\x7fELF")), "%s is not an ELF cubin", cubin)
			}
			data, err := imageFS.ReadFile("images/" + name)
			require.NoErrorf(t, err, "no embedded image for %s: run cudaext/kernels/build.sh", f)
			require.Equalf(t, images[name], sha(data), "embedded %s differs from the manifest", name)
			delete(images, name)
		}
	}
	require.Emptyf(t, images, "manifest lists images without a source")
	require.Emptyf(t, cubinOf, "manifest lists cubins of modules without a source")
}

// TestInstancesUpToDate fails when the generated gemm_*.cu files differ
// from what the tile table in tiles.go generates.
func TestInstancesUpToDate(t *testing.T) {
	for _, f := range Families {
		for _, m := range Maths {
			got, err := os.ReadFile(InstanceFile(f, m))
			require.NoError(t, err)
			require.Truef(t, bytes.Equal(got, GenerateInstances(f, m)),
				"%s is stale: run cudaext/kernels/build.sh (or go run ./cudaext/kernels/gen)", InstanceFile(f, m))
		}
	}
	require.NotEmpty(t, HopperMaths())
	for _, m := range HopperMaths() {
		got, err := os.ReadFile(HopperInstanceFile(m))
		require.NoError(t, err)
		require.Truef(t, bytes.Equal(got, GenerateHopperInstances(m)),
			"%s is stale: run cudaext/kernels/build.sh (or go run ./cudaext/kernels/gen)", HopperInstanceFile(m))
	}
}

// TestTileTableMirrorsCpp checks the Go formulas against the C++ ones by
// reading the constants of fg::TileCfg from gemm.cuh.
func TestTileTableMirrorsCpp(t *testing.T) {
	src, err := os.ReadFile("gemm.cuh")
	require.NoError(t, err)
	for _, expr := range []string{
		"kGatherBStage = BN * LdK > BK * LdMB ? BN * LdK : BK * LdMB;",
		"kGatherAStage = H_ ? BM * BK : BM * LdK;",
		"kGatherBSt = H_ ? BN * BK : kGatherBStage;",
		"kPairsAStage = H_ ? BK * BM : BK * LdMA;",
		"kPairsBStage = H_ ? BK * BN : BK * LdMB;",
		"kPairsSmem = S * (kPairsAStage + kPairsBStage) * kElem + 2 * kIdxRing * BK * 4 + (H_ ? 1024 : 0);",
		"S * (kGatherAStage + kGatherBSt) * kElem + 4 * BM + 4 * kIdxRing * (BM + 1) + (H_ ? 1024 : 0);",
		"kIdxRing = 2 * S;",
		"LdK = BK + kChunk;",
		"LdMA = BM + 8;",
		"LdMB = BN + 8;",
		"kChunk = 16 / kElem;",
	} {
		require.Containsf(t, string(src), expr, "gemm.cuh changed a formula mirrored by SmemBytes")
	}
	ws, err := os.ReadFile("gather_ws.cuh")
	require.NoError(t, err)
	for _, expr := range []string{
		"constexpr int ws_head_bytes() { return 4 * C::BM + 48; }",
		"return (4 * kWsMaxTaps * (C::BM + 1) + 15) / 16 * 16;",
		"return C::S * (C::BM + C::BN) * C::BK * C::kElem + 16 * C::S + MB * ws_head_bytes<C>() + MI * ws_index_bytes<C>() +",
		"return minBlocks == 1 ? ws_smem_bytes<C>(MB, MI) <= 227 * 1024 : 2 * (ws_smem_bytes<C>(MB, MI) + 1024) <= 233472;",
		"return ws_fits<C>(minBlocks, 2, 1) ? 2 : 1;",
		"return ws_fits<C>(minBlocks, 2, 2) ? 2 : 1;",
		"constexpr int kDescriptions = ws_descriptions<Cfg, PW>(MINB);",
		"constexpr int kIndices = ws_indices<Cfg, PW>(MINB);",
		"WsLayout<Cfg, PW, kDescriptions, kIndices>::kSmem == SMEM",
		"ASt = C::BM * C::BK, BSt = C::BN * C::BK;",
		fmt.Sprintf("constexpr int kWsMaxTaps = %d;", MaxSpecializedTaps),
	} {
		require.Containsf(t, string(ws), expr, "gather_ws.cuh changed a formula mirrored by SmemBytes")
	}
	narrow := 0
	for _, m := range Maths {
		for _, tile := range Tiles {
			if tile.Supports(m) {
				require.NoError(t, tile.Validate(m))
				continue
			}
			narrow++
			require.True(t, tile.Narrow)
			require.NotEqual(t, 2, m.ElemSize(), "%s must support %v", tile.Name(), m)
			require.ErrorContains(t, tile.Validate(m), "16-bit arithmetics only")
			require.NotContains(t, string(GenerateInstances(Gather, m)), KernelName(Gather, m, tile)+",")
		}
	}
	for _, tile := range Tiles {
		for _, m := range []Math{F16, BF16} {
			require.True(t, tile.Supports(m), "%s: every tile serves the 16-bit arithmetics", tile.Name())
		}
	}
	// The fixed heuristic's tiles serve every arithmetic.
	for _, tile := range Tiles[:4] {
		require.False(t, tile.Narrow, tile.Name())
	}
	t.Logf("%d (tile, arithmetic) pairs not instantiated", narrow)
	// Names are unique and procedural.
	seen := map[string]bool{}
	re := regexp.MustCompile(`^spconv_(gather|pairs)_(f32|tf32|f16|bf16)_m(\d+)n(\d+)k(\d+)w(\d+)x(\d+)s(\d+)$`)
	for _, f := range Families {
		for _, m := range Maths {
			for _, tile := range Tiles {
				n := KernelName(f, m, tile)
				require.False(t, seen[n], n)
				seen[n] = true
				sub := re.FindStringSubmatch(n)
				require.NotNil(t, sub, n)
				bm, _ := strconv.Atoi(sub[3])
				require.Equal(t, tile.BM, bm)
				back, err := ParseTile(strings.SplitN(n, "_", 4)[3])
				require.NoError(t, err)
				require.Equal(t, tile, back)
			}
		}
	}
	_, err = ParseTile("m1n1k1w1x1s1")
	require.Error(t, err)

	// Hopper tiles: valid where they are instantiated, a clear error
	// elsewhere, unique names ending in "h", and each serves exactly the
	// arithmetics whose BK elements fill 128 bytes.
	for _, tile := range HopperTiles {
		require.True(t, tile.Hopper)
		if tile.Producers > 0 {
			require.True(t, strings.HasSuffix(tile.Name(), fmt.Sprintf("hp%d", tile.Producers)), tile.Name())
			require.Equal(t, 32*(tile.WM+tile.Producers), tile.Threads())
			// Its plain twin: the table's tile of its shape without
			// producers, of the same stages where the table has one; none
			// only where no plain tile of its shape can be built or for the
			// tf32 256×128 tile (it is there for its swapped twin), and then
			// it serves 3×3×3 kernels and smaller only.
			plain, ok := tile.Plain()
			same := tile
			same.Producers = 0
			if !ok {
				for _, m := range Maths {
					if tile.Supports(m) && !tile.wideSwapped(m) {
						require.ErrorContains(t, same.Validate(m), "StageCopy", tile.Name())
					}
				}
				require.True(t, tile.ServesTaps(MaxSpecializedTaps), tile.Name())
				require.False(t, tile.ServesTaps(MaxSpecializedTaps+1), tile.Name())
			} else {
				require.Contains(t, HopperTiles, plain, tile.Name())
				require.Equal(t, [4]int{tile.BM, tile.BN, tile.BK, 0}, [4]int{plain.BM, plain.BN, plain.BK, plain.Producers}, tile.Name())
				require.True(t, tile.ServesTaps(125), tile.Name())
			}
			if slices.Contains(HopperTiles, same) {
				require.Equal(t, same, plain)
			}
			for _, m := range Maths {
				require.False(t, tile.Has(Pairs, m), "%s: a warp-specialised tile has no pairs kernel", tile.Name())
				if tile.Supports(m) {
					require.Contains(t, string(GenerateHopperInstances(m)), "FG_GATHER_WS_KERNEL("+KernelName(Gather, m, tile)+",")
				}
				for _, wt := range []bool{false, true} {
					sk := "FG_GATHER_WS_SK_KERNEL(" + StreamKName(m, tile, wt) + ","
					if tile.HasStreamK(m) && (!wt || tile.HasTransposed(m)) {
						require.Contains(t, string(GenerateHopperInstances(m)), sk)
						_, ok := KernelModule(StreamKName(m, tile, wt))
						require.True(t, ok, "%s missing from the manifest", StreamKName(m, tile, wt))
					} else {
						require.NotContains(t, string(GenerateHopperInstances(m)), sk)
					}
				}
				// The twins, each generated and in the manifest exactly where
				// its rule says, with its threads per block.
				inst := string(GenerateHopperInstances(m))
				wide := tile.Supports(m) && tile.BM == 256 && tile.BN == 128
				for _, tw := range []struct {
					macro, name     string
					has, want       bool
					threads, wantTh int
				}{
					// Half skip: tf32 tiles of two or more warpgroups only,
					// but the 256×128 one.
					{"FG_GATHER_WS_HS_KERNEL", HalfSkipName(m, tile), tile.HasHalfSkip(m), tile.Supports(m) && m == TF32 && tile.BM >= 128 && !wide,
						tile.Threads(), tile.Threads()},
					// Register A: tf32 tiles of 128 rows and 128 columns.
					{"FG_GATHER_WS_RA_KERNEL", RegisterAName(m, tile), tile.HasRegisterA(m), tile.Supports(m) && m == TF32 && tile.BN == 128 && tile.BM == 128,
						tile.RegisterAThreads(), 32 * (tile.WM + 4)},
					// Swapped: tiles of 128 rows and 64 columns (one
					// consumer warpgroup), and the 256×128 ones (two).
					{"FG_GATHER_WS_SW_KERNEL", SwappedName(m, tile), tile.HasSwapped(m), tile.Supports(m) && (tile.BM == 128 && tile.BN == 64 || wide),
						tile.SwappedThreads(), 32 * (4*tile.BN/64 + tile.Producers)},
					// Swapped, weight read transposed: the same tiles, 16-bit.
					{"FG_GATHER_WS_SW_KERNEL", SwappedTransposedName(m, tile), tile.HasSwappedTransposed(m),
						tile.Supports(m) && (tile.BM == 128 && tile.BN == 64 || wide) && m.ElemSize() == 2,
						tile.SwappedThreads(), 32 * (4*tile.BN/64 + tile.Producers)},
				} {
					line := tw.macro + "(" + tw.name + ","
					require.Equal(t, tw.want, tw.has, "%s: %s %v", tw.macro, tile.Name(), m)
					if tw.has {
						require.Contains(t, inst, line)
						_, ok := KernelModule(tw.name)
						require.True(t, ok, "%s missing from the manifest", tw.name)
						require.Equal(t, tw.wantTh, tw.threads, tw.name)
					} else {
						require.NotContains(t, inst, line)
					}
				}
			}
		} else {
			require.True(t, strings.HasSuffix(tile.Name(), "h"), tile.Name())
			plain, ok := tile.Plain()
			require.True(t, ok, tile.Name())
			require.Equal(t, tile, plain)
			require.True(t, tile.ServesTaps(125), tile.Name())
		}
		require.False(t, seen[tile.Name()], tile.Name())
		seen[tile.Name()] = true
		back, err := ParseTile(tile.Name())
		require.NoError(t, err)
		require.Equal(t, tile, back)
		require.False(t, tile.Has(Pairs, F32))
		require.False(t, tile.Has(Pairs, TF32), "tf32 wgmma has no MN-major operands")
		require.False(t, tile.HasTransposed(TF32))
		served := 0
		for _, m := range Maths {
			if !tile.Supports(m) {
				require.ErrorContains(t, tile.Validate(m), "128 bytes")
				continue
			}
			served++
			require.Equal(t, 128, tile.BK*m.ElemSize())
			require.NoError(t, tile.Validate(m))
			require.LessOrEqual(t, SmemBytes(Gather, m, tile), 227*1024)
			require.LessOrEqual(t, SmemBytes(Pairs, m, tile), 227*1024)
			require.Equal(t, m.ElemSize() == 2 && tile.Producers == 0, tile.Has(Pairs, m))
			require.Equal(t, m.ElemSize() == 2, tile.HasTransposed(m))
			require.Contains(t, string(GenerateHopperInstances(m)), KernelName(Gather, m, tile)+",")
		}
		require.Positive(t, served, tile.Name())
	}
	bad := HopperTiles[0]
	bad.WN = 2
	require.ErrorContains(t, bad.Validate(F16), "one warp column")
	bad = HopperTiles[0]
	bad.BN = 32
	require.ErrorContains(t, bad.Validate(F16), "BN 64, 128 or 256")
	bad = HopperTiles[0]
	bad.Stages = 2
	require.ErrorContains(t, bad.Validate(F16), "3 stages")
	bad = HopperTiles[0]
	bad.Producers = 3 // an odd count: 12 rows per pass break the swizzle
	require.ErrorContains(t, bad.Validate(F16), "producer warps")
	bad = Tiles[0]
	bad.Producers = 2
	require.ErrorContains(t, bad.Validate(F16), "only a Hopper tile")
}

// TestTileDescriptions checks the tile descriptions of the
// warp-specialised blocks (fg::ws_descriptions, ws_indices): two heads
// and two indices where the block is alone on its SM or two blocks still
// fit an SM with them, two heads sharing one index where only that fits,
// one of each otherwise, none for tiles without producers; and that the
// shared memory holds the stages, the heads and the indices.
func TestTileDescriptions(t *testing.T) {
	for _, c := range []struct {
		name           string
		math           Math
		heads, indices int
		blocks         int
	}{
		{"m128n256k64w8x1s4hp4", F16, 2, 2, 1},
		{"m128n64k64w8x1s8hp8", F16, 2, 2, 1},
		{"m128n64k64w8x1s4hp4", F16, 2, 1, 2},
		{"m128n64k64w8x1s3hp4", F16, 2, 2, 2},
		{"m192n128k64w12x1s5hp4", F16, 2, 1, 1},
		{"m256n128k32w16x1s4hp4", TF32, 2, 1, 1},
		{"m128n64k64w8x1s4h", F16, 0, 0, 2},
		{"m128n128k32w2x4s3", F16, 0, 0, 1},
	} {
		tile, err := ParseTile(c.name)
		require.NoError(t, err)
		require.Equal(t, c.heads, tile.Descriptions(c.math), c.name)
		require.Equal(t, c.indices, tile.Indices(c.math), c.name)
		if tile.Producers == 0 {
			continue
		}
		require.Equal(t, c.blocks, tile.BlocksPerSM(Gather, c.math), c.name)
		esz := c.math.ElemSize()
		stages := tile.Stages*(tile.BM+tile.BN)*tile.BK*esz + 16*tile.Stages + 1024
		head, index := 4*tile.BM+48, (4*27*(tile.BM+1)+15)/16*16
		require.Equal(t, stages+c.heads*head+c.indices*index, SmemBytes(Gather, c.math, tile), c.name)
	}
}

func TestImagesOverride(t *testing.T) {
	base, err := Images()
	require.NoError(t, err)
	require.NotEmpty(t, base)
	for _, im := range base {
		require.Equal(t, "embedded", im.Source)
		require.NotEmpty(t, im.Data)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "conv_aux.ptx"), []byte(".version 7.8"), 0o644))
	t.Setenv(EnvImage, dir)
	over, err := Images()
	require.NoError(t, err)
	require.Len(t, over, len(base))
	for _, im := range over {
		if im.Name == "conv_aux" {
			require.Equal(t, append([]byte(".version 7.8"), 0), im.Data)
			require.Equal(t, filepath.Join(dir, "conv_aux.ptx"), im.Source)
		} else {
			require.Equal(t, "embedded", im.Source)
		}
	}
	t.Setenv(EnvImage, filepath.Join(dir, "missing"))
	_, err = Images()
	require.ErrorContains(t, err, EnvImage)
}

// TestImagesHopperForm checks which form of each Hopper module Images
// returns: the sm_90a cubin by default and with FLEXGEMM_HOPPER_PTX=0, the
// NUL-terminated sm_90a PTX with FLEXGEMM_HOPPER_PTX=1, the same set of
// modules either way, and an error naming the variable for another value.
func TestImagesHopperForm(t *testing.T) {
	tests := []struct {
		env     string
		wantPTX bool
		wantErr bool
	}{
		{env: "", wantPTX: false},
		{env: "0", wantPTX: false},
		{env: "1", wantPTX: true},
		{env: "yes", wantErr: true},
	}
	var names []string
	for _, tc := range tests {
		t.Run("env="+tc.env, func(t *testing.T) {
			t.Setenv(EnvHopperPTX, tc.env)
			ims, err := Images()
			if tc.wantErr {
				require.ErrorContains(t, err, EnvHopperPTX)
				return
			}
			require.NoError(t, err)
			var got []string
			hopper := 0
			for _, im := range ims {
				got = append(got, im.Name)
				require.Equal(t, "embedded", im.Source)
				if !strings.HasSuffix(im.Name, "_sm90a") {
					continue
				}
				hopper++
				if tc.wantPTX {
					require.Containsf(t, string(im.Data), ".target sm_90a", "%s: not the PTX", im.Name)
					require.Equalf(t, byte(0), im.Data[len(im.Data)-1], "%s: PTX not NUL-terminated", im.Name)
				} else {
					require.Truef(t, bytes.HasPrefix(im.Data, []byte("\x7fELF")), "%s: not the cubin", im.Name)
				}
			}
			require.Equal(t, len(HopperMaths()), hopper, "one Hopper module per arithmetic with Hopper tiles")
			if names == nil {
				names = got
			}
			require.Equal(t, names, got, "the same modules in either form")
		})
	}
}

// TestKernelResources checks resources.txt (written by resources.sh from
// the sm_90 cubins of the embedded fatbins and the embedded sm_90a cubins)
// against the images: it must have been written from the images embedded
// now; no kernel uses local memory; no GEMM kernel has a stack frame
// (spilled registers) beyond knownGEMMStackFrames; every GEMM kernel of
// the tile tables (mma.sync and Hopper) is listed; and the pairs kernels that
// TileCfg::kPairsMinBlocks holds to two blocks per SM (8 warps, at most 16
// accumulator fragments per warp, two blocks' shared memory) fit two
// blocks by registers.
func TestKernelResources(t *testing.T) {
	kernels, images := readResources(t)
	fatbins, err := fs.Glob(imageFS, "images/*.fatbin")
	require.NoError(t, err)
	cubins, err := fs.Glob(imageFS, "images/*_sm90a.cubin.gz")
	require.NoError(t, err)
	require.NotEmpty(t, cubins)
	fatbins = append(fatbins, cubins...)
	require.Len(t, images, len(fatbins), "resources.txt lists other images than those embedded: run cudaext/kernels/resources.sh")
	for _, p := range fatbins {
		img, err := imageFS.ReadFile(p)
		require.NoError(t, err)
		require.Equalf(t, sha(img), images[filepath.Base(p)], "%s changed since resources.txt was written: run cudaext/kernels/resources.sh", p)
	}
	for name, u := range kernels {
		require.Zerof(t, u.local, "%s uses %d bytes of local memory", name, u.local)
		if strings.HasPrefix(name, "spconv_gather_") || strings.HasPrefix(name, "spconv_pairs_") {
			require.LessOrEqualf(t, u.stack, knownGEMMStackFrames[name],
				"%s has a %d-byte stack frame (spilled registers), more than the %d known: see knownGEMMStackFrames", name, u.stack, knownGEMMStackFrames[name])
		}
	}
	for name := range knownGEMMStackFrames {
		u, ok := kernels[name]
		require.Truef(t, ok, "knownGEMMStackFrames lists %s, which resources.txt lacks", name)
		require.Equalf(t, knownGEMMStackFrames[name], u.stack, "%s's stack frame changed: update knownGEMMStackFrames", name)
	}
	for _, m := range Maths {
		for _, tile := range Tiles {
			if !tile.Supports(m) {
				continue
			}
			names := []string{KernelName(Gather, m, tile), TransposedName(m, tile)}
			if tile.Has(Pairs, m) {
				names = append(names, KernelName(Pairs, m, tile))
			}
			for _, name := range names {
				_, ok := kernels[name]
				require.Truef(t, ok, "resources.txt lacks %s: run cudaext/kernels/resources.sh", name)
			}
			fragments := (tile.BM / tile.WM / 16) * (tile.BN / tile.WN / 8)
			if !tile.Has(Pairs, m) || tile.WM*tile.WN < 8 || fragments > 16 || !twoPerSM(SmemBytes(Pairs, m, tile)) {
				continue
			}
			regs := (kernels[KernelName(Pairs, m, tile)].regs + 7) / 8 * 8
			require.LessOrEqualf(t, 2*tile.Threads()*regs, 65536,
				"%s: %d registers per thread leave one block per SM, its launch bounds promise two", KernelName(Pairs, m, tile), regs)
		}
		for _, tile := range HopperTiles {
			if !tile.Supports(m) {
				continue
			}
			names := []string{KernelName(Gather, m, tile)}
			if tile.HasTransposed(m) {
				names = append(names, TransposedName(m, tile))
			}
			if tile.Has(Pairs, m) {
				names = append(names, KernelName(Pairs, m, tile))
			}
			for _, name := range names {
				_, ok := kernels[name]
				require.Truef(t, ok, "resources.txt lacks the Hopper kernel %s: run cudaext/kernels/resources.sh", name)
			}
		}
	}
}

// kernelUsage is one kernel's line of resources.txt: registers per
// thread, local-memory bytes and stack-frame bytes (where ptxas puts the
// registers it spills) of its sm_90 (or sm_90a) cubin.
type kernelUsage struct{ regs, local, stack int }

// knownGEMMStackFrames are the GEMM kernels with a stack frame, in bytes:
// registers spilled at their launch bounds' register limit (128 a thread;
// ptxas -v: nvcc 11.8's on spconv_pairs_f32_m128n128k32w2x4s3, 24 bytes of
// spill stores and 48 of loads; CUDA 12.4's on the Hopper ones, 28 bytes of
// stores for the 256×128 input-gradient gathers, 4 for the 256×128 pairs
// kernels). Found
// in session 60, when resources.txt began to record stack frames (before,
// TestKernelResources looked at local memory only, which cuobjdump reports
// as 0 for these); whether the spills cost time is not measured. A GEMM
// kernel not listed must have none, and a listed one no larger.
var knownGEMMStackFrames = map[string]int{
	"spconv_gather_f16_m128n128k32w2x4s3":       16,
	"spconv_gather_f16_m128n128k32w2x4s3_wt":    16,
	"spconv_gather_f16_m128n128k64w2x4s3_wt":    16,
	"spconv_gather_bf16_m128n128k32w2x4s3":      16,
	"spconv_gather_bf16_m128n128k32w2x4s3_wt":   16,
	"spconv_gather_bf16_m128n128k64w2x4s3_wt":   16,
	"spconv_pairs_f32_m128n128k32w2x4s3":        16,
	"spconv_gather_f16_m256n128k64w16x1s4h_wt":  32,
	"spconv_gather_bf16_m256n128k64w16x1s4h_wt": 32,
	"spconv_pairs_f16_m256n128k64w16x1s4h":      8,
	"spconv_pairs_bf16_m256n128k64w16x1s4h":     8,
	// The register-A twin of the tf32 128×128 tile (off by default,
	// EnvRegisterA), since its rows' sources are read from the row-major
	// description index (step 133).
	"spconv_gather_tf32_m128n128k32w8x1s6hp4_ra": 16,
}

// readResources parses resources.txt: the kernels' usage by name and the
// images' sha256 by file name.
func readResources(t *testing.T) (map[string]kernelUsage, map[string]string) {
	t.Helper()
	data, err := os.ReadFile("resources.txt")
	require.NoError(t, err, "run cudaext/kernels/resources.sh")
	kernels := map[string]kernelUsage{}
	images := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "image":
			images[f[2]] = f[1]
		case len(f) == 5 && f[0] == "registers":
			regs, err1 := strconv.Atoi(f[2])
			local, err2 := strconv.Atoi(f[3])
			stack, err3 := strconv.Atoi(f[4])
			require.NoError(t, err1, line)
			require.NoError(t, err2, line)
			require.NoError(t, err3, line)
			kernels[f[1]] = kernelUsage{regs, local, stack}
		default:
			t.Fatalf("resources.txt: bad line %q", line)
		}
	}
	return kernels, images
}

// fullOccupancyKernels are kernels measured to lose time when they cannot
// keep an SM's 2,048 threads resident: memory-latency-bound loops,
// launched in blocks of 256 threads, whose speed is the loads and atomics
// they have in flight. Each must fit 32 registers a thread (65,536 /
// 2,048). An entry names the measurement that put it here (the engine's
// FLEXGEMM_OCCUPANCY_CAP measures a kernel's sensitivity without a
// rebuild).
var fullOccupancyKernels = []struct{ name, why string }{
	// Session 48, step 100: an optional row list in the same kernel took
	// them to 44 registers (six blocks per SM) and fp16 (16, 1024, 8)
	// steps, which sum per tap, 3.4–4.8 % slower on the H200. (The hybrid
	// gathers' spconv_pertap_reduce_rows_* sum a few rows only.)
	{"spconv_pertap_reduce_f32", "per-tap sum, step 100"},
	{"spconv_pertap_reduce_f16", "per-tap sum, step 100"},
	{"spconv_pertap_reduce_bf16", "per-tap sum, step 100"},
	// Session 49, FLEXGEMM_OCCUPANCY_CAP (call 5): the kmap_ kernels held
	// to 32 resident warps per SM made the fp16 RES 1024 kernel-map build
	// 45 % slower (0.730 → 1.055 ms, three processes each) and that
	// inference step 4.3 %; the brick insert runs at 64 warps and the
	// brick search at 40 (kmap_nbr_brick's launch bounds hold it there).
	// Measured apart (session 50, call 1): the insert alone at 32 warps
	// made the map 10.5 % slower, a residency effect; the search's 36 % was
	// a second wave of its fixed grid, not latency. The masks_, sort_, scan_ and hash_
	// kernels and the split-K reductions at 32 warps moved no step by more
	// than 1 % (calls 4 and 5), so they have no budget.
	{"kmap_brick_insert", "brick search's insert, session 49"},
}

// TestKernelRegisterBudgets: the kernels of fullOccupancyKernels fit a
// full SM of resident threads, so that a change that costs them registers
// fails here, not in a benchmark run sessions later.
func TestKernelRegisterBudgets(t *testing.T) {
	kernels, _ := readResources(t)
	const maxRegs = 65536 / 2048
	for _, k := range fullOccupancyKernels {
		u, ok := kernels[k.name]
		require.Truef(t, ok, "resources.txt lacks %s", k.name)
		require.LessOrEqualf(t, u.regs, maxRegs, "%s (%s): %d registers a thread leave fewer than 2,048 threads resident per SM", k.name, k.why, u.regs)
	}
}

// TestKernelsAwaitPriorGrid: every kernel of every source opens with
// fg_await_prior_grid (pdl.cuh), and the manifest says of every kernel
// of every image (the extern "C" ones: the engine launches kernels by
// those names only) that its compiled code waits, so the engine may
// launch any of them with programmatic stream serialization.
func TestKernelsAwaitPriorGrid(t *testing.T) {
	files, err := filepath.Glob("*.cu")
	require.NoError(t, err)
	headers, err := filepath.Glob("*.cuh")
	require.NoError(t, err)
	global := regexp.MustCompile(`__global__`)
	// After the body's brace: blanks and macro line continuations, then the
	// wait.
	opening := regexp.MustCompile(`^\{(?:\s|\\)*fg_await_prior_grid\(\);`)
	kernels := 0
	for _, f := range append(files, headers...) {
		if f == "pdl.cuh" {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, loc := range global.FindAllIndex(src, -1) {
			body := bytes.IndexByte(src[loc[1]:], '{')
			require.GreaterOrEqualf(t, body, 0, "%s: a kernel without a body", f)
			at := src[loc[1]+body:]
			line := 1 + bytes.Count(src[:loc[0]], []byte("\n"))
			require.Truef(t, opening.Match(at), "%s:%d: the kernel does not open with fg_await_prior_grid();", f, line)
			kernels++
		}
	}
	require.Greater(t, kernels, 100)

	entries, _, _, err := ParseManifest(Manifest())
	require.NoError(t, err)
	defined, waits := 0, 0
	for _, e := range entries {
		switch e.Kind {
		case "kernel":
			if strings.HasPrefix(e.Name, "_Z") {
				continue // a C++ symbol the engine never launches (CUB's EmptyKernel)
			}
			defined++
			require.Truef(t, KernelWaits(e.Module, e.Name), "manifest: %s (%s) does not wait for the grids ahead of it", e.Name, e.Module)
			require.Falsef(t, KernelWaits(e.Module+"_other", e.Name), "%s waits in a module that does not define it", e.Name)
		case "waits":
			waits++
			mod, ok := KernelModule(e.Name)
			require.Truef(t, ok && mod == e.Module, "manifest: waits %s %s, but the kernel is defined in %q", e.Module, e.Name, mod)
		}
	}
	require.Equal(t, defined, waits)
}
