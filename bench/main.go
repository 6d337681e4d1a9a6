package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
)

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

// runMain dispatches the subcommands and returns the exit status.
func runMain(args []string, stdout, stderr io.Writer) int {
	var err error
	switch {
	case len(args) > 0 && args[0] == "compare":
		err = compareMain(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "tune":
		err = tuneMain(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "ab":
		err = abMain(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "padding":
		err = paddingMain(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "timeline":
		err = timelineMain(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "pairsched":
		err = pairschedMain(args[1:], stdout, stderr)
	case len(args) > 0 && args[0] == "version":
		// The commit the records of this binary carry (commitID), for
		// scripts that run a binary built elsewhere.
		_, err = fmt.Fprintln(stdout, commitID(""))
	case len(args) > 0 && args[0] == "run":
		err = benchMain(args[1:], stdout, stderr)
	default:
		err = benchMain(args, stdout, stderr)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 2
	}
	fmt.Fprintln(stderr, "bench:", err)
	return 1
}

func benchMain(args []string, stdout, stderr io.Writer) error {
	o, err := parseRunFlags(args, stderr)
	if err != nil {
		return err
	}
	_, err = runBench(o, stdout, stderr)
	return err
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}
