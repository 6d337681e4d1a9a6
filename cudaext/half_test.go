package cudaext

import (
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

func TestHalfConversion(t *testing.T) {
	cases := []struct {
		in   float32
		bits uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},
		{65520, 0x7c00}, // rounds up to Inf
		{1e9, 0x7c00},
		{float32(math.Inf(-1)), 0xfc00},
		{6.103515625e-05, 0x0400},   // smallest normal
		{5.960464477539063e-08, 1},  // smallest subnormal
		{2.9802322387695312e-08, 0}, // half of it: ties to even (0)
		{4.470348358154297e-08, 1},  // 0.75 of it: rounds up
		{1 + 1.0/2048, 0x3c00},      // tie, even stays
		{1 + 3.0/2048, 0x3c02},      // tie, odd rounds up
	}
	for _, c := range cases {
		require.Equalf(t, c.bits, Float32ToHalfBits(c.in), "%g", c.in)
	}
	require.Equal(t, uint16(0x7e00), Float32ToHalfBits(float32(math.NaN()))&0x7e00)
	require.True(t, math.IsNaN(float64(HalfBitsToFloat32(0x7e00))))
	// Every finite half round-trips exactly.
	for h := range 1 << 16 {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		f := HalfBitsToFloat32(uint16(h))
		require.Equalf(t, uint16(h), Float32ToHalfBits(f), "bits %#04x value %g", h, f)
	}
	// Rounding error is at most half an ulp on random normals.
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		f := float32((r.Float64()*2 - 1) * 1000)
		g := HalfBitsToFloat32(Float32ToHalfBits(f))
		require.LessOrEqual(t, math.Abs(float64(f-g)), math.Abs(float64(f))/2048+1e-7)
	}
}

func TestBFloat16Conversion(t *testing.T) {
	require.Equal(t, uint16(0x3f80), Float32ToBFloat16Bits(1))
	require.Equal(t, uint16(0xc000), Float32ToBFloat16Bits(-2))
	require.Equal(t, uint16(0x3f80), Float32ToBFloat16Bits(math.Float32frombits(0x3f808000))) // tie to even
	require.Equal(t, uint16(0x3f82), Float32ToBFloat16Bits(math.Float32frombits(0x3f818000))) // tie, odd up
	require.Equal(t, uint16(0x7f80), Float32ToBFloat16Bits(float32(math.Inf(1))))
	require.True(t, math.IsNaN(float64(BFloat16BitsToFloat32(Float32ToBFloat16Bits(float32(math.NaN()))))))
	for h := range 1 << 16 {
		if h&0x7f80 == 0x7f80 {
			continue
		}
		require.Equal(t, uint16(h), Float32ToBFloat16Bits(BFloat16BitsToFloat32(uint16(h))))
	}
}

// TestParamsMirrorCpp checks that the Go kernel-parameter structs list the
// fields of fg::GatherParams / fg::PairsParams in gemm.cuh and fg::StreamK
// in gather_ws.cuh, in order.
func TestParamsMirrorCpp(t *testing.T) {
	for _, c := range []struct {
		file, cpp string
		typ       reflect.Type
	}{
		{"gemm.cuh", "GatherParams", reflect.TypeOf(gatherParams{})},
		{"gemm.cuh", "PairsParams", reflect.TypeOf(pairsParams{})},
		{"gather_ws.cuh", "StreamK", reflect.TypeOf(streamKArgs{})},
	} {
		src, err := os.ReadFile("kernels/" + c.file)
		require.NoError(t, err)
		body := regexp.MustCompile(`(?s)struct ` + c.cpp + ` \{(.*?)\n\};`).FindSubmatch(src)
		require.NotNil(t, body, c.cpp)
		var cppFields []string
		for _, line := range strings.Split(string(body[1]), "\n") {
			if i := strings.Index(line, "//"); i >= 0 {
				line = line[:i]
			}
			line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), ";"))
			if line == "" {
				continue
			}
			// "const int* tbl" or "long long M, N, Kc, V"
			decl := strings.Split(line, ",")
			first := strings.Fields(decl[0])
			cppFields = append(cppFields, strings.TrimLeft(first[len(first)-1], "*"))
			for _, d := range decl[1:] {
				cppFields = append(cppFields, strings.TrimSpace(d))
			}
		}
		var goFields []string
		for i := range c.typ.NumField() {
			f := c.typ.Field(i)
			require.Equal(t, uintptr(8), f.Type.Size(), "%s.%s must be 8 bytes", c.typ.Name(), f.Name)
			goFields = append(goFields, f.Name)
		}
		require.Equal(t, len(cppFields), len(goFields), "%s: %v vs %v", c.cpp, cppFields, goFields)
		norm := func(s string) string {
			var b strings.Builder
			for _, r := range s {
				if r != '_' {
					b.WriteRune(unicode.ToLower(r))
				}
			}
			return b.String()
		}
		for i := range cppFields {
			// tile_taps is TileTap in Go; compare on a common prefix.
			a, b := norm(cppFields[i]), norm(goFields[i])
			require.Truef(t, strings.HasPrefix(a, b) || strings.HasPrefix(b, a), "%s field %d: C++ %s, Go %s", c.cpp, i, cppFields[i], goFields[i])
		}
		require.Equal(t, uintptr(8*len(cppFields)), c.typ.Size())
	}
}
