//go:build cudaext

package cudaext

import "github.com/flexgemm-go/flexgemm/sparse"

// The engine builds kernel maps of device coordinates for
// sparse.SubmanifoldMapOf, StridedMapOf and TransposedMapOf.
var _ sparse.MapEngine = (*Engine)(nil)
