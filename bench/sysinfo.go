package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
)

// cpuDevice describes the host CPU as "cpu: <model>, <n> cores".
func cpuDevice() string {
	return fmt.Sprintf("cpu: %s, %d cores", cpuModel(), runtime.NumCPU())
}

// cpuModel returns the CPU model name from /proc/cpuinfo, or GOOS/GOARCH
// where that file does not exist.
func cpuModel() string {
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "model name" {
				return strings.Join(strings.Fields(v), " ")
			}
		}
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}

// buildCommit is the commit the binary was built from, when the build
// sets it: go build -ldflags "-X main.buildCommit=$(git rev-parse --short=12 HEAD)"
// (bench/gpu_run.sh and cudaext/perf_run.sh do). It matters where Go's own
// VCS stamping is off (GOFLAGS=-buildvcs=false) and the binary runs in a
// copy of the tree whose git metadata is not the build's.
var buildCommit string

// commitID identifies the code being measured: the -commit flag if given,
// else the commit stamped by the build scripts (buildCommit), else the VCS
// revision stamped by Go ("-dirty" when modified), else `git describe
// --always --dirty` in the working directory, else "unknown".
func commitID(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if buildCommit != "" {
		return buildCommit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev string
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if dirty {
				rev += "-dirty"
			}
			return rev
		}
	}
	out, err := exec.Command("git", "describe", "--always", "--dirty", "--tags").Output()
	if err == nil {
		if s := string(bytes.TrimSpace(out)); s != "" {
			return s
		}
	}
	return "unknown"
}
