//go:build !unix

package worker

import (
	"bufio"
	"io"
	"net"
)

// sockIO is not available here: net.Conn's Read and Write serve the
// connection, and the writer goroutine writes what a reader queued.
type sockIO struct{}

func newSockIO(net.Conn) *sockIO { return nil }

func (*sockIO) Write(b []byte) (int, error)            { return 0, nil }
func (*sockIO) tryWrite([]byte) (int, error)           { return 0, nil }
func sockReader(br *bufio.Reader, _ *sockIO) io.Reader { return br }
