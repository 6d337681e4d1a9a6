package autotune

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

var h200 = Device{Name: "NVIDIA H200", SMs: 132, Major: 9, Minor: 0}

func testKey() Key {
	return Key{Device: h200, Op: OpSubmConv, Dir: Fwd, DType: "fp16", V: 27, Ci: 64, Co: 64, LogN: Bucket(15192)}
}

func TestBucket(t *testing.T) {
	for _, tc := range []struct{ n, want int }{
		{-7, -1}, {0, -1}, {1, 0}, {2, 1}, {3, 1}, {4, 2}, {192, 7}, {848, 9}, {1023, 9}, {1024, 10},
		{15192, 13}, {4113056, 21}, {math.MaxInt, 62},
	} {
		got := Bucket(tc.n)
		require.Equal(t, tc.want, got, "Bucket(%d)", tc.n)
		if tc.n >= 1 {
			// ⌊log2 n⌋ by definition: 2^b ≤ n < 2^(b+1).
			require.LessOrEqual(t, uint64(1)<<got, uint64(tc.n))
			require.Greater(t, uint64(1)<<(got+1), uint64(tc.n))
		}
	}
}

func TestKeyValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Key)
		ok   bool
	}{
		{"valid", func(*Key) {}, true},
		{"N=0 bucket", func(k *Key) { k.LogN = Bucket(0) }, true},
		{"fp32 tf32", func(k *Key) { k.DType, k.TF32 = "fp32", true }, true},
		{"fp64", func(k *Key) { k.DType = "fp64" }, true},
		{"no device name", func(k *Key) { k.Device.Name = "" }, false},
		{"negative SMs", func(k *Key) { k.Device.SMs = -1 }, false},
		{"empty op", func(k *Key) { k.Op = "" }, false},
		{"op with space", func(k *Key) { k.Op = "subm conv" }, false},
		{"bad direction", func(k *Key) { k.Dir = "bwd" }, false},
		{"bad dtype", func(k *Key) { k.DType = "float32" }, false},
		{"tf32 with fp16", func(k *Key) { k.TF32 = true }, false},
		{"V=0", func(k *Key) { k.V = 0 }, false},
		{"Ci=0", func(k *Key) { k.Ci = 0 }, false},
		{"Co<0", func(k *Key) { k.Co = -3 }, false},
		{"bucket -2", func(k *Key) { k.LogN = -2 }, false},
		{"bucket 63", func(k *Key) { k.LogN = 63 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := testKey()
			tc.edit(&k)
			err := k.Validate()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrKey)
			}
		})
	}
}

func TestKeyString(t *testing.T) {
	k := testKey()
	require.Equal(t, "subm_conv fwd fp16 V=27 Ci=64 Co=64 N~2^13 on NVIDIA H200 (sm_90, 132 SMs)", k.String())
	k.DType, k.TF32, k.LogN, k.Dir = "fp32", true, -1, WGrad
	require.Equal(t, "subm_conv wgrad fp32+tf32 V=27 Ci=64 Co=64 N~0 on NVIDIA H200 (sm_90, 132 SMs)", k.String())
	require.Equal(t, "masked_implicit_gemm/b64x128/splitk=4", Candidate{"masked_implicit_gemm", "b64x128", 4}.String())
	require.Equal(t, "explicit_gemm", Candidate{Algorithm: "explicit_gemm", SplitK: 1}.String())
}

func TestKeysDifferByDTypeAndTF32(t *testing.T) {
	// FlexGEMM's split-K keys ignore dtype and TF32; ours must not.
	a := testKey()
	b := a
	b.DType = "bf16"
	c := a
	c.DType = "fp32"
	d := c
	d.TF32 = true
	seen := map[Key]bool{a: true, b: true, c: true, d: true}
	require.Len(t, seen, 4)
}
