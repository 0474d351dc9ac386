package backendtest

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

// streamItem is a value of countStream: its number and where it was made.
type streamItem struct {
	I       int    `json:"i"`
	Node    string `json:"node"`
	Attempt int    `json:"attempt"`
}

type countStreamArgs struct {
	N      int    `json:"n"`
	FailAt int    `json:"failAt,omitempty"` // fail instead of yielding this one (0: never)
	GateAt int    `json:"gateAt,omitempty"` // on attempt 0, block on Gate before yielding this one
	Gate   string `json:"gate,omitempty"`
}

// countStream yields 0..N-1 with where each was made.
var countStream = ray.NewStreamTask("backendtest.count_stream", func(ctx context.Context, in countStreamArgs, yield func(streamItem) error) error {
	rc, _ := ray.Runtime(ctx)
	for i := range in.N {
		if in.FailAt > 0 && i == in.FailAt {
			return fmt.Errorf("no value %d", i)
		}
		if in.Gate != "" && i == in.GateAt && rc.Attempt() == 0 {
			if _, err := blockOn(ctx, in.Gate); err != nil {
				return err
			}
		}
		if err := yield(streamItem{I: i, Node: rc.NodeName(), Attempt: rc.Attempt()}); err != nil {
			return err
		}
	}
	return nil
})

// counterStream yields the counter's next N values, blocking on Gate
// before value GateAt (when set) and failing at FailAt.
var counterStream = ray.NewStreamMethod(counterClass, "stream", func(ctx context.Context, c *counter, in countStreamArgs, yield func(int) error) error {
	for i := range in.N {
		if in.FailAt > 0 && i == in.FailAt {
			return fmt.Errorf("no value %d", i)
		}
		if in.Gate != "" && i == in.GateAt {
			if _, err := blockOn(ctx, in.Gate); err != nil {
				return err
			}
		}
		c.n++
		if err := yield(c.n); err != nil {
			return err
		}
	}
	return nil
})

// testStreams: a streaming task's values arrive in order, then the end or
// the task's error; closing the stream ends the task's context; a task lost
// with its node is retried without delivering a value twice.
func (s *suite) testStreams(t *testing.T) {
	s.need(t, s.h.Capabilities.Concurrent, "Concurrent")
	t.Run("InOrder", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		n := 0
		for v, err := range countStream.Remote(ctx, c, countStreamArgs{N: 50}, ray.StreamBuffer(4)).All(ctx) {
			is.NoErr(err)
			is.Equal(v.I, n)
			n++
		}
		is.Equal(n, 50)
	})
	t.Run("ErrorAfterValues", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		st := countStream.Remote(ctx, c, countStreamArgs{N: 50, FailAt: 3})
		for i := range 3 {
			v, err := st.Next(ctx)
			is.NoErr(err)
			is.Equal(v.I, i)
		}
		_, err := st.Next(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		is.True(strings.Contains(err.Error(), "no value 3"))
		is.True(strings.Contains(err.Error(), "backendtest.count_stream"))
		st.Close()
	})
	t.Run("CloseEndsTheTask", func(t *testing.T) {
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		name, g := newGate(1)
		defer g.release()
		st := countStream.Remote(ctx, c, countStreamArgs{N: 10, GateAt: 2, Gate: name})
		for i := range 2 {
			v, err := st.Next(ctx)
			is.NoErr(err)
			is.Equal(v.I, i)
		}
		s.waitChan(t, g.arrivedCh, "the task to block")
		st.Close()
		s.waitChan(t, g.cancelCh, "the closed stream's task to see its context end")
		_, err := st.Next(ctx)
		is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	})
	t.Run("Method", func(t *testing.T) {
		// A streaming method runs in its actor, holding its slot: values
		// in order, the actor's state kept; an error after values; a
		// closed stream ends the method's context and frees the actor.
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		h := counterClass.Remote(ctx, c, 10)
		n := 0
		for v, err := range counterStream.Remote(ctx, h, countStreamArgs{N: 30}, ray.StreamBuffer(4)).All(ctx) {
			is.NoErr(err)
			is.Equal(v, 11+n)
			n++
		}
		is.Equal(n, 30)
		v, err := counterAdd.Remote(ctx, h, 0).Get(ctx)
		is.NoErr(err)
		is.Equal(v, 40)

		st := counterStream.Remote(ctx, h, countStreamArgs{N: 10, FailAt: 2})
		for i := range 2 {
			v, err := st.Next(ctx)
			is.NoErr(err)
			is.Equal(v, 41+i)
		}
		_, err = st.Next(ctx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		is.True(strings.Contains(err.Error(), "no value 2"))

		name, g := newGate(1)
		defer g.release()
		st = counterStream.Remote(ctx, h, countStreamArgs{N: 10, GateAt: 1, Gate: name})
		v, err = st.Next(ctx)
		is.NoErr(err)
		is.Equal(v, 43)
		s.waitChan(t, g.arrivedCh, "the method to block")
		st.Close()
		s.waitChan(t, g.cancelCh, "the closed stream's method to see its context end")
		v, err = counterAdd.Remote(ctx, h, 0).Get(ctx) // the actor is free again
		is.NoErr(err)
		is.Equal(v, 43)
	})
	t.Run("RetriedWithoutDuplicates", func(t *testing.T) {
		s.need(t, s.h.Capabilities.FaultInjection, "FaultInjection")
		is := is.New(t)
		c, ctx := s.cluster(t, nil), s.ctxT(t)
		name, g := newGate(1)
		defer g.release()
		st := countStream.Remote(ctx, c, countStreamArgs{N: 10, GateAt: 5, Gate: name},
			ray.NodeSelector{"zone": "in(a,b)"}, ray.StreamBuffer(2))
		defer st.Close()
		var got []streamItem
		for range 5 {
			v, err := st.Next(ctx)
			is.NoErr(err)
			got = append(got, v)
		}
		s.waitChan(t, g.arrivedCh, "the task to block before its sixth value")
		lostNode := got[4].Node
		is.NoErr(c.Backend().(backend.FaultInjector).KillNode(ctx, lostNode))
		for {
			v, err := st.Next(ctx)
			if err == io.EOF {
				break
			}
			is.NoErr(err)
			got = append(got, v)
		}
		is.Equal(len(got), 10) // no value twice, none lost
		for i, v := range got {
			is.Equal(v.I, i)
		}
		is.Equal(got[5].Attempt, 1) // the rest came from the retry,
		is.True(got[5].Node != lostNode)
	})
}
