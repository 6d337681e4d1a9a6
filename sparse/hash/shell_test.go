package hash

import "github.com/flexgemm-go/flexgemm/sparse/synth"

// shellCoords returns FlexGEMM's benchmark sphere shell (synth.SphereShell)
// as flat [N, 4] coordinates sorted by (batch, x, y, z).
func shellCoords(res, batch int) []int32 {
	coords, _ := synth.SphereShell(res, batch)
	return coords
}
