package worker

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
)

// EnvOutputTee, when "1", makes a launched worker also write the lines it
// forwards to drivers to its own stdout and stderr, so that a pod's log
// keeps them all; otherwise a line goes to the process's own stream only
// when no driver took it (before a driver connects, or when none asked).
const EnvOutputTee = "GORAY_WORKER_OUTPUT_TEE"

// maxOutputLine is the longest line forwarded whole; a longer one is sent
// in pieces of this size.
const maxOutputLine = 64 << 10

// captureOutput sends what the process's code writes to os.Stdout and
// os.Stderr (and the standard log package, and the programs it starts
// with those files) to srv's drivers, line by line, through pipes that
// replace the two files. The process's own file descriptors 1 and 2 are
// kept: the Go runtime's fatal errors (and the worker's own logs, made
// before) still go there, so a crash is never lost with its pump.
// stop restores the files and waits for the pumps to drain.
func captureOutput(srv *Server, tee bool) (stop func(), err error) {
	origOut, origErr := os.Stdout, os.Stderr
	rOut, wOut, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	rErr, wErr, err := os.Pipe()
	if err != nil {
		rOut.Close()
		wOut.Close()
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { pumpOutput(srv, 1, rOut, origOut, tee) })
	wg.Go(func() { pumpOutput(srv, 2, rErr, origErr, tee) })
	os.Stdout, os.Stderr = wOut, wErr
	log.SetOutput(wErr)
	return func() {
		os.Stdout, os.Stderr = origOut, origErr
		log.SetOutput(origErr)
		wOut.Close()
		wErr.Close()
		wg.Wait()
	}, nil
}

func pumpOutput(srv *Server, stream int, r *os.File, orig io.Writer, tee bool) {
	defer r.Close()
	br := bufio.NewReaderSize(r, maxOutputLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			text := line
			if text[len(text)-1] == '\n' {
				text = text[:len(text)-1]
			}
			if !srv.Output(stream, append([]byte(nil), text...)) || tee {
				orig.Write(line) //nolint:errcheck // nowhere else to report it
				if line[len(line)-1] != '\n' {
					fmt.Fprintln(orig)
				}
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// PrefixOutput returns a ClientOptions.OnOutput that writes each line to
// stdout or stderr (by its stream) with a prefix naming where it comes
// from, as Ray prints its workers' output on the driver:
//
//	(task examples.square, node=cpu-1, pid=4242) hello
//	(worker pid=4242) a line written while several tasks ran
//
// nil writers mean this process's os.Stdout and os.Stderr; io.Discard
// drops the stream. Writes of whole lines are serialised, so lines of
// several workers never interleave.
func PrefixOutput(stdout, stderr io.Writer) func(Output) {
	var mu sync.Mutex
	return func(o Output) {
		w := stdout
		if o.Stream == 2 {
			w = stderr
		}
		if w == nil {
			w = os.Stdout
			if o.Stream == 2 {
				w = os.Stderr
			}
		}
		if w == io.Discard {
			return
		}
		b := append(o.appendTo(nil), '\n')
		mu.Lock()
		defer mu.Unlock()
		w.Write(b) //nolint:errcheck // nowhere else to report it
	}
}

// OutputLog keeps the last lines of worker output per node, for a
// dashboard: [OutputLog.Record] takes them (as ClientOptions.OnOutput, or
// from one), [OutputLog.Recent] returns them. Lines that name no work (see
// [Output]) are kept under the node "". The zero value keeps
// DefaultOutputLines per node; it is safe for concurrent use.
type OutputLog struct {
	// Lines is how many lines are kept per node; 0 means
	// DefaultOutputLines.
	Lines int

	mu    sync.Mutex
	nodes map[string][]Output
}

// DefaultOutputLines is how many lines an OutputLog keeps per node.
const DefaultOutputLines = 50

// Record keeps o as its node's newest line.
func (l *OutputLog) Record(o Output) {
	n := l.Lines
	if n <= 0 {
		n = DefaultOutputLines
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nodes == nil {
		l.nodes = map[string][]Output{}
	}
	lines := append(l.nodes[o.Node], o)
	if len(lines) > n {
		lines = append(lines[:0], lines[len(lines)-n:]...)
	}
	l.nodes[o.Node] = lines
}

// Recent returns node's last lines, oldest first.
func (l *OutputLog) Recent(node string) []Output {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Output(nil), l.nodes[node]...)
}

// String is the line with its prefix, as PrefixOutput writes it (without
// the line break).
func (o Output) String() string { return string(o.appendTo(nil)) }

func (o Output) appendTo(b []byte) []byte {
	if o.Source != "" {
		b = fmt.Appendf(b, "(%s, node=%s, pid=%d) ", o.Source, o.Node, o.PID)
	} else {
		b = fmt.Appendf(b, "(worker pid=%d) ", o.PID)
	}
	return append(b, o.Line...)
}

// Strings returns the lines with their prefixes.
func (l *OutputLog) Strings(node string) []string {
	recent := l.Recent(node)
	out := make([]string, len(recent))
	for i, o := range recent {
		out[i] = o.String()
	}
	return out
}
