package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPairLaunchMakespan checks the list scheduling of the model on
// launches small enough to schedule by hand.
func TestPairLaunchMakespan(t *testing.T) {
	for _, c := range []struct {
		name       string
		dur        []int
		sms        int
		launch, lb int
		longest    int // longest first over the whole launch
	}{
		{"long last", []int{1, 1, 4}, 2, 5, 4, 4},
		{"one SM", []int{3, 1, 2}, 1, 6, 6, 6},
		{"more SMs than blocks", []int{2, 5}, 4, 5, 5, 5},
		{"even", []int{2, 2, 2, 2}, 2, 4, 4, 4},
		{"two long late", []int{1, 1, 1, 1, 3, 3}, 2, 5, 5, 5},
		{"three SMs", []int{2, 2, 2, 1, 1, 6}, 3, 8, 6, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := &pairLaunch{splits: 1, taps: len(c.dur), tiles: 1, dur: c.dur, offLen: make([]int, len(c.dur))}
			require.Equal(t, c.launch, l.makespan(l.launchOrder(), c.sms))
			require.Equal(t, c.lb, l.lowerBound(c.sms))
			require.Equal(t, c.longest, l.makespan(l.groupOrder(1, l.byDuration), c.sms))
			require.Equal(t, c.longest, l.makespan(l.tailOrder(1), c.sms))
		})
	}
}

// TestSplitLaunchCountsEveryPair: with one pair per step, no setup and one
// tile, the blocks of the window split add up to the map's pairs (the
// centre's rows, and every other tap's pairs through its list or its
// mirror's), for any number of splits; every order is a permutation and
// no order beats the lower bound.
func TestSplitLaunchCountsEveryPair(t *testing.T) {
	m, err := shellMap(24)
	require.NoError(t, err)
	n, err := countPairs(m)
	require.NoError(t, err)
	pairs := int(n)
	for _, splits := range []int{1, 3, 7} {
		l := splitLaunch(m, splits, 1, 1, 0)
		require.Len(t, l.dur, splits*27)
		total := 0
		for _, d := range l.dur {
			total += d
		}
		require.Equal(t, pairs, total, "splits %d", splits)
		lb := l.lowerBound(8)
		for _, o := range [][]int{l.launchOrder(), l.groupOrder(2, l.byDuration), l.tailOrder(2), l.groupOrder(1, l.byOffset)} {
			require.ElementsMatch(t, l.launchOrder(), o)
			require.GreaterOrEqual(t, l.makespan(o, 8), lb)
		}
	}
	require.Equal(t, 0, splitLaunch(m, 1, 1, 1, 0).offLen[13], "the centre")
	require.Equal(t, 3, splitLaunch(m, 1, 1, 1, 0).offLen[0], "a corner")
}

func TestPairschedMain(t *testing.T) {
	var out, errb bytes.Buffer
	require.NoError(t, pairschedMain([]string{"-res", "24", "-splits", "4", "-tiles", "1", "-sms", "8", "-groups", "1,2"}, &out, &errb))
	s := out.String()
	require.Contains(t, s, "RES 24 (window split):")
	require.Contains(t, s, "| longest first in groups of g splits |")
	require.Equal(t, 5, strings.Count(s, "\n|"), "header, separator and three rows: %s", s)
	require.Error(t, pairschedMain([]string{"-splits", "0"}, &out, &errb))
	out.Reset()
	require.NoError(t, pairschedMain([]string{"-res", "24", "-balanced", "64", "-tiles", "1", "-groups", "1"}, &out, &errb))
	require.Contains(t, out.String(), "RES 24 (balanced split):")
}

// TestBalancedLaunch: unsplit (tiles·taps reach six waves) every tap is one
// block of all its steps, so with one pair per step and no setup the
// blocks add up to the map's pairs; split, the used slices still cover
// every step (the unused ones take a time unit each) and no order beats
// the lower bound.
func TestBalancedLaunch(t *testing.T) {
	m, err := shellMap(24)
	require.NoError(t, err)
	n, err := countPairs(m)
	require.NoError(t, err)
	pairs := int(n)
	un := balancedLaunch(m, 64, 1, 1, 0, 4) // 27 blocks ≥ 6·4
	require.Equal(t, 1, un.splits)
	sum := 0
	for _, d := range un.dur {
		sum += d
	}
	require.Equal(t, pairs, sum)

	sp := balancedLaunch(m, 64, 1, 1, 0, 132)
	require.Greater(t, sp.splits, 1)
	sum = 0
	for _, d := range sp.dur {
		sum += d
	}
	require.GreaterOrEqual(t, sum, pairs)
	require.LessOrEqual(t, sum, pairs+len(sp.dur))
	require.GreaterOrEqual(t, sp.makespan(sp.launchOrder(), 132), sp.lowerBound(132))
}
