package grad_test

import "github.com/flexgemm-go/flexgemm/internal/gtest"

// Shared test helpers (package internal/gtest) under their local names.
type testMap = gtest.Map

var (
	randCoords = gtest.RandCoords
	testMaps   = gtest.Maps
	randDense  = gtest.RandDense
	input      = gtest.Input
	sumSquares = gtest.SumSquares
	name       = gtest.Name
)
