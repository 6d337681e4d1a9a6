package kmap_test

import (
	"fmt"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// deviceCopy stands for an engine that keeps a map's neighbour table in
// device memory; HostTables is where it would download it.
type deviceCopy struct {
	nbr       []int32
	downloads int
}

func (d *deviceCopy) HostTables(m *kmap.Map) (kmap.Tables, error) {
	d.downloads++
	return kmap.Tables{Nbr: append([]int32(nil), d.nbr...)}, nil
}

// A map whose table is supplied on first host use, as maps built on a GPU
// are: Nbr stays nil until Load (or a method reading it) fetches it, once.
func ExampleMap_Load() {
	coords := []int32{0, 0, 0, 0, 0, 0, 0, 1}
	ext := grid.Extent{Batch: 1, X: 1, Y: 1, Z: 2}
	conv := grid.Submanifold([3]int{1, 1, 3}, [3]int{1, 1, 1})
	dev := &deviceCopy{nbr: []int32{-1, 0, 1, 0, 1, -1}}
	m := &kmap.Map{Kind: kmap.Submanifold, Conv: conv, In: ext, Out: ext, NIn: 2, NOut: 2,
		InCoords: coords, OutCoords: coords, Source: dev}
	fmt.Println(m.Loaded(), m.Nbr)
	if err := m.Load(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Loaded(), m.Nbr, m.Reverse(), dev.downloads)
	// Output:
	// false []
	// true [-1 0 1 0 1 -1] [1 0 -1 -1 1 0] 1
}

// ExampleKeyTaps shows the significance order of a 3-tap Gray key over 8
// rows: tap 0, in every row, is read as the lowest bit, tap 1, in half of
// them, as the highest.
func ExampleKeyTaps() {
	fmt.Println(kmap.KeyTaps([]int64{8, 4, 1}, 8))
	// Output: [0 2 1]
}
