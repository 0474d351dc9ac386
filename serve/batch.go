package serve

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/goray-dev/goray/ray"
)

// BatchOptions bound the batches of a [Batched] endpoint, as Ray Serve's
// @serve.batch(max_batch_size, batch_wait_timeout_s) does.
type BatchOptions struct {
	// MaxSize is the most requests in one call; 0 means 10 (Ray's
	// default). A batch is sent as soon as it is full.
	MaxSize int
	// MaxWait is how long the first request of a batch waits for more
	// before the batch is sent anyway; 0 means 10ms (Ray's default). A
	// negative value means no wait: every request goes alone.
	MaxWait time.Duration
}

func (o BatchOptions) withDefaults() BatchOptions {
	if o.MaxSize <= 0 {
		o.MaxSize = 10
	}
	if o.MaxWait == 0 {
		o.MaxWait = 10 * time.Millisecond
	}
	if o.MaxWait < 0 {
		o.MaxWait = 0
	}
	return o
}

// Batched serves POST /<deployment> as [Unary] does, one JSON request in
// and one JSON reply out, but calls m on the replica's host-0 actor with
// the requests that reach one replica together: up to MaxSize of them, the
// first waiting at most MaxWait for the others. m gets the inputs in
// arrival order and must return one output per input, in the same order;
// each caller gets its own. This is Ray Serve's @serve.batch: one call
// amortizes a model step over many requests.
//
// If m fails, every request of the batch fails with its error (and is
// retried on another replica where the deployment allows it, each on its
// own); if m returns a different number of outputs than inputs, every
// request fails with an error naming the method and both counts. A request
// whose client goes away still rides in its batch; the call is cancelled
// only when every request of the batch has gone.
//
// Batches fill only when a replica has that many requests at once: set
// the deployment's MaxConcurrentRequests to at least MaxSize. A deployment
// has one endpoint for POST /<deployment>: Unary or Batched, not both.
func Batched[A, I, O any](m *ray.Method[A, []I, []O], opts BatchOptions) Endpoint[A] {
	b := &batcher[A, I, O]{m: m, opts: opts.withDefaults(), open: map[*ray.ActorHandle[A]]*batch[A, I, O]{}}
	return unaryEndpoint("serve.Batched("+m.Name()+")", b.call)
}

// batcher gathers the requests of each replica (by its host-0 actor) into
// batches. A replica has at most one open batch; a full or timed-out batch
// is sent and forgotten, so replicas that went away leave nothing behind.
type batcher[A, I, O any] struct {
	m    *ray.Method[A, []I, []O]
	opts BatchOptions

	mu   sync.Mutex
	open map[*ray.ActorHandle[A]]*batch[A, I, O]
}

type batch[A, I, O any] struct {
	h       *ray.ActorHandle[A] // set when closed
	ins     []I
	replies []chan batchReply[O]
	timer   *time.Timer

	// ctx is the call's; it is cancelled once every caller has gone.
	ctx     context.Context
	cancel  context.CancelFunc
	mu      sync.Mutex
	waiting int
}

type batchReply[O any] struct {
	out O
	err error
}

func (b *batcher[A, I, O]) call(ctx context.Context, h *ray.ActorHandle[A], in I) (O, error) {
	reply := make(chan batchReply[O], 1)
	b.mu.Lock()
	bt := b.open[h]
	if bt == nil {
		bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		bt = &batch[A, I, O]{ctx: bctx, cancel: cancel}
		b.open[h] = bt
		if b.opts.MaxWait > 0 {
			bt.timer = time.AfterFunc(b.opts.MaxWait, func() {
				b.mu.Lock()
				open := b.open[h] == bt // not sent already as full
				if open {
					b.close(h, bt)
				}
				b.mu.Unlock()
				if open {
					b.send(bt)
				}
			})
		}
	}
	bt.ins = append(bt.ins, in)
	bt.replies = append(bt.replies, reply)
	bt.mu.Lock()
	bt.waiting++
	bt.mu.Unlock()
	full := len(bt.ins) >= b.opts.MaxSize || b.opts.MaxWait == 0
	if full {
		// Closed to new requests before the lock is let go, so that a
		// batch never grows past MaxSize.
		b.close(h, bt)
	}
	b.mu.Unlock()
	if full {
		go b.send(bt)
	}
	select {
	case r := <-reply:
		return r.out, r.err
	case <-ctx.Done():
		bt.mu.Lock()
		bt.waiting--
		if bt.waiting == 0 {
			bt.cancel()
		}
		bt.mu.Unlock()
		var zero O
		return zero, ctx.Err()
	}
}

// close makes bt no longer h's open batch. b.mu must be held.
func (b *batcher[A, I, O]) close(h *ray.ActorHandle[A], bt *batch[A, I, O]) {
	delete(b.open, h)
	if bt.timer != nil {
		bt.timer.Stop()
	}
	bt.h = h
}

// send calls the method with a closed batch's inputs and answers each
// caller.
func (b *batcher[A, I, O]) send(bt *batch[A, I, O]) {
	defer bt.cancel()
	outs, err := b.m.Remote(bt.ctx, bt.h, bt.ins).Get(bt.ctx)
	if err == nil && len(outs) != len(bt.ins) {
		err = fmt.Errorf("serve.Batched: method %s returned %d outputs for a batch of %d inputs; it must return one per input, in order",
			b.m.Name(), len(outs), len(bt.ins))
	}
	for i, r := range bt.replies {
		if err != nil {
			r <- batchReply[O]{err: err}
		} else {
			r <- batchReply[O]{out: outs[i]}
		}
	}
}
