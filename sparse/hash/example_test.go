package hash_test

import (
	"errors"
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/hash"
)

func ExampleFromCoords() {
	ext := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	coords := []int32{
		0, 1, 2, 3,
		0, 0, 0, 0,
		0, 3, 3, 3,
	}
	t, err := hash.FromCoords(coords, ext)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.Len(), t.Narrow())
	fmt.Println(t.Get(ext.Key(0, 3, 3, 3), -1), t.Get(ext.Key(0, 1, 1, 1), -1))

	_, err = hash.FromCoords([]int32{0, 1, 1, 1, 0, 2, 2, 2, 0, 1, 1, 1}, ext)
	fmt.Println(err)
	fmt.Println(errors.Is(err, hash.ErrDuplicate))
	// Output:
	// 3 true
	// 2 -1
	// hash: rows 0 and 2 are both (0, 1, 1, 1): hash: duplicate key 21 at batch index 2: values 0 and 2
	// true
}

func ExampleTable_LookupBatch() {
	t, err := hash.New(hash.Options{Capacity: 3})
	if err != nil {
		panic(err)
	}
	if err := t.InsertBatch([]uint64{100, 200, 300}, []int32{7, 8, 9}); err != nil {
		panic(err)
	}
	out := make([]int32, 4)
	n, err := t.LookupBatch([]uint64{300, 150, 100, 200}, out, -1)
	fmt.Println(n, out, err)
	// Output:
	// 3 [9 -1 7 8] <nil>
}

func ExampleOptions_fixed() {
	t, err := hash.New(hash.Options{Capacity: 4, Fixed: true})
	if err != nil {
		panic(err)
	}
	for k := range uint64(5) {
		if err := t.Insert(k, int32(k)); err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println(t.Len(), t.Cap())
	// Output:
	// hash: table full: cannot insert key 4 into a fixed table holding 4 keys
	// 4 4
}
