package train

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/storage"
)

// TestPartitionedRank: rank 1's ring connections break while it stays
// connected to the driver and says nothing (a network partition). Its
// neighbours' collectives ask the driver, which names rank 1 after its
// grace, and every rank's collective fails with that verdict: no hang.
func TestPartitionedRank(t *testing.T) {
	is := is.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bucket := storage.NewMem()
	defer bucket.Close()
	const world = 4
	rz, err := newRendezvous("127.0.0.1:0", "token", 0, world, &store{b: bucket, prefix: "t/"}, nil, 200*time.Millisecond,
		&reportSink{progress: noProgress{}}, &lineSink{w: io.Discard}, nil, runInfo{run: "t"})
	is.NoErr(err)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for rank := range world {
		wg.Go(func() {
			in := &workerInput{Run: "t", Rendezvous: rz.addr(), Token: "token", Rank: rank, WorldSize: world, NumSlices: 1, Verdict: 10 * time.Second}
			sess, err := dialSession(ctx, in.Rendezvous)
			if err != nil {
				errs[rank] = err
				return
			}
			w := &Worker{in: in, sess: sess}
			errs[rank] = w.run(ctx, func(ctx context.Context, w *Worker, _ json.RawMessage) error {
				if w.Rank() == 1 {
					w.ring.next.Close()
					w.ring.prev.Close()
					<-ctx.Done() // silent until the driver's abort cancels it
					return context.Cause(ctx)
				}
				return AllReduce(ctx, w, make([]float32, 1000), Sum)
			})
			sess.leave(errs[rank], false)
		})
	}
	wg.Wait()
	rz.close(time.Second)
	for rank, err := range errs {
		var wf *WorkerFailedError
		is.True(errors.As(err, &wf)) // every rank's error is the verdict
		is.Equal(wf.Rank, 1)         // naming the partitioned rank
		t.Logf("rank %d: %v", rank, err)
	}
}

// TestAbortWinsOverCancel: a driver's abort fails the ring and then
// cancels the loop's context, so a collective sees both at once. It must
// return the failure, which names the failed rank, not context.Canceled
// (which it did on some runs of TestWorkerFailureAbortsCollectives).
func TestAbortWinsOverCancel(t *testing.T) {
	is := is.New(t)
	r := newRing(0, 2, &session{}, nil, time.Second)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	abort := &WorkerFailedError{Rank: 1, Cause: "injected failure"}
	err := r.run(ctx, opAllReduce, func(uint32) error {
		// The abort arrives while the collective waits on its peer.
		r.fail(abort)
		cancel(abort)
		return &peerIOError{peer: 1, err: io.EOF}
	})
	var wf *WorkerFailedError
	is.True(errors.As(err, &wf)) // the failure, not context.Canceled
	is.Equal(wf.Rank, 1)
}
