package worker

import (
	"io"
	"strings"
	"testing"

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
