package cudaext

import "github.com/flexgemm-go/flexgemm/sparse"

// floatSuffix returns the suffix that names a kernel's instance for the
// float dtype dt ("f32", "f16", "bf16": spconv_reduce_f16, vox_mean_bf16,
// …); ok is false for any other dtype.
func floatSuffix(dt sparse.DType) (sfx string, ok bool) {
	switch dt {
	case sparse.Float32:
		return "f32", true
	case sparse.Float16:
		return "f16", true
	case sparse.BFloat16:
		return "bf16", true
	}
	return "", false
}
