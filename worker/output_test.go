package worker

import (
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"
)

func TestPrefixOutput(t *testing.T) {
	is := is.New(t)
	var out, errs strings.Builder
	f := PrefixOutput(&out, &errs)
	f(Output{Stream: 1, Source: "task t", Node: "n1", PID: 7, Line: []byte("hello")})
	f(Output{Stream: 2, PID: 7, Line: []byte("while several ran")})
	is.Equal(out.String(), "(task t, node=n1, pid=7) hello\n")
	is.Equal(errs.String(), "(worker pid=7) while several ran\n")
	PrefixOutput(io.Discard, io.Discard)(Output{Stream: 1, Line: []byte("dropped")}) // no panic, nothing written
}

// A line read just as the only running task ends is still named after
// it: the task leaves the running set and becomes the last work that ran
// alone in one step for Output. A reader spins on the label while a fresh
// server's first task begins and ends; once the task has begun, no label
// may come out unnamed (one did about once in 20 runs of the process
// test, TestWorkerOutputReachesTheDriver, before the two steps shared the
// server's lock).
func TestOutputNamedAcrossTheTaskEnd(t *testing.T) {
	is := is.New(t)
	lbl := workLabel{name: "t.say", node: "node-1", task: true}
	unnamed := 0
	for range 3000 {
		s := &Server{conns: map[*serverConn]struct{}{}}
		sc := &serverConn{conn: &conn{}, s: s, output: true}
		s.conns[sc] = struct{}{}
		var begun, ended atomic.Bool
		bad := make(chan int, 1)
		go func() {
			n := 0
			for !ended.Load() {
				after := begun.Load()
				if _, got := s.outputTo(); after && got != lbl {
					n++
				}
			}
			bad <- n
		}()
		runtime.Gosched()
		is.True(sc.begin(1, runEntry{lbl: lbl}))
		begun.Store(true)
		sc.end(1)
		for range 3 { // a few reads after the end, as the pipe's reader may lag
			runtime.Gosched()
		}
		ended.Store(true)
		unnamed += <-bad
	}
	is.Equal(unnamed, 0) // lines read between a task's end and its record
}

// TestOutputLastAloneAcrossConnections: work that ends with nothing else
// running on its connection names the output read after it only if no
// other connection runs work either; with one connection, its own work
// decides.
func TestOutputLastAloneAcrossConnections(t *testing.T) {
	is := is.New(t)
	s := &Server{conns: map[*serverConn]struct{}{}, born: time.Now()}
	one := &serverConn{conn: &conn{}, s: s, output: true}
	s.conns[one] = struct{}{}
	b := workLabel{name: "t.b", node: "n", task: true}
	is.True(one.begin(1, runEntry{lbl: b}))
	one.end(1)
	_, got := s.outputTo()
	is.Equal(got, b) // ended alone a moment ago

	// Another connection (that asked for no output) runs work: what ends
	// on the first one did not run alone in the process.
	other := &serverConn{conn: &conn{}, s: s}
	s.conns[other] = struct{}{}
	is.True(other.begin(7, runEntry{lbl: workLabel{name: "t.a", node: "n", task: true}}))
	is.True(one.begin(2, runEntry{lbl: b}))
	one.end(2)
	_, got = s.outputTo()
	is.Equal(got, workLabel{})
	other.end(7)
	is.True(one.begin(3, runEntry{lbl: b}))
	one.end(3)
	_, got = s.outputTo()
	is.Equal(got, b)
}
