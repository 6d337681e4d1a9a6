// Package maptest holds the kernel-map comparison shared by the tests of
// packages that build maps in more than one place (sparse's dispatchers,
// the device layer's map builders). It is imported by tests only.
package maptest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// RequireSameMap requires got (loaded first: it may be an engine's map
// whose host tables are not downloaded yet) to describe the same map as
// want: kind, geometry, row counts, coordinates, neighbour and reverse
// tables entry for entry, and a valid map. Empty and nil tables count as
// equal.
func RequireSameMap(t testing.TB, want, got *kmap.Map) {
	t.Helper()
	require.NoError(t, got.Load())
	require.Equal(t, want.Kind, got.Kind)
	require.Equal(t, want.Conv, got.Conv)
	require.Equal(t, want.In, got.In)
	require.Equal(t, want.Out, got.Out)
	require.Equal(t, want.NIn, got.NIn)
	require.Equal(t, want.NOut, got.NOut)
	sameInts(t, "InCoords", want.InCoords, got.InCoords)
	sameInts(t, "OutCoords", want.OutCoords, got.OutCoords)
	sameInts(t, "Nbr", want.Nbr, got.Nbr)
	sameInts(t, "Reverse", want.Reverse(), got.Reverse())
	require.NoError(t, got.Validate())
}

func sameInts(t testing.TB, name string, want, got []int32) {
	t.Helper()
	require.Equal(t, len(want), len(got), "len(%s)", name)
	for i := range want {
		require.Equal(t, want[i], got[i], "%s[%d]", name, i)
	}
}
