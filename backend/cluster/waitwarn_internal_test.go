package cluster

import (
	"testing"
	"time"

	"github.com/matryer/is"
)

// A waiting request is due a warning at the threshold, then at twice its
// age each time, at most maxWaitWarnGap apart; one whose age drops below
// the threshold (the head of its queue changed) starts over.
func TestWarnStateBackoff(t *testing.T) {
	is := is.New(t)
	const T = 10 * time.Second
	var s warnState
	for _, step := range []struct {
		age  time.Duration
		want bool
	}{
		{5 * time.Second, false},
		{10 * time.Second, true},
		{15 * time.Second, false},
		{20 * time.Second, true},
		{39 * time.Second, false},
		{40 * time.Second, true},
		{80 * time.Second, true},
		{160 * time.Second, true},
		{320 * time.Second, true}, // next at 320s + 5min, the largest gap
		{600 * time.Second, false},
		{620 * time.Second, true},
		{3 * time.Second, false}, // a new head: starts over
		{10 * time.Second, true},
	} {
		is.Equal(s.due(step.age, T), step.want) // due at this age
	}
}

// The clock gives the first tick that saw a sequence number, keeps its
// last samples, and bounds older numbers by its oldest sample.
func TestSeqClock(t *testing.T) {
	is := is.New(t)
	var c seqClock
	t0 := time.Unix(1000, 0)
	c.mark(5, t0)
	c.mark(5, t0.Add(time.Second)) // no new numbers: not a sample
	c.mark(9, t0.Add(2*time.Second))
	at, ok := c.since(3)
	is.True(ok)
	is.Equal(at, t0)
	at, _ = c.since(5)
	is.Equal(at, t0)
	at, _ = c.since(6)
	is.Equal(at, t0.Add(2*time.Second))
	_, ok = c.since(10) // queued after the last tick
	is.True(!ok)

	for i := range seqClockSamples {
		c.mark(uint64(10+i), t0.Add(time.Duration(3+i)*time.Second))
	}
	is.True(len(c.seqs) <= seqClockSamples)
	oldest := c.times[0]
	at, ok = c.since(1) // dropped: bounded by the oldest sample kept
	is.True(ok)
	is.Equal(at, oldest)
	at, _ = c.since(uint64(10 + seqClockSamples - 1))
	is.Equal(at, t0.Add(time.Duration(3+seqClockSamples-1)*time.Second))
}
