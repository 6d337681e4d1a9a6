package safetensors_test

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/examples/unet/internal/safetensors"
)

func Example() {
	w, err := safetensors.NewTensor("layer.weight", []int{2, 2}, []float32{1, 2, 3, 4})
	if err != nil {
		panic(err)
	}
	b, err := safetensors.Encode([]safetensors.Tensor{w}, map[string]string{"format": "pt"})
	if err != nil {
		panic(err)
	}
	f, err := safetensors.Decode(b)
	if err != nil {
		panic(err)
	}
	t, _ := f.Get("layer.weight")
	fmt.Println(len(b), "bytes:", t.DType, t.Shape, t.Data, f.Metadata["format"])

	b[8] = 'x' // the header must be a JSON object
	_, err = safetensors.Decode(b)
	fmt.Println(err)
	// Output:
	// 128 bytes: F32 [2 2] [1 2 3 4] pt
	// safetensors: invalid file: header is not a UTF-8 JSON object
}
