//go:build !cudaext

package main

import (
	"errors"
	"io"
)

// tuneMain is `bench tune`, which needs the GPU build.
func tuneMain(args []string, stdout, stderr io.Writer) error {
	return errors.New("bench tune needs the GPU build: go build -tags cudaext ./bench")
}
