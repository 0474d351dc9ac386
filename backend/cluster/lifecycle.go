package cluster

import (
	"context"

	"golang.org/x/sync/errgroup"

	"github.com/goray-dev/goray/backend"
)

// Syncer is an optional interface of a [NodeSource] whose Run reports its
// first nodes asynchronously. Synced returns once Run has reported every
// node that existed when it started (Kubernetes: once its informers have
// synced); Start waits for it, so that work submitted right after Start
// finds those nodes. Without it Start does not wait, and work that no
// node reported so far can hold fails as Infeasible.
type Syncer interface {
	Synced(ctx context.Context) error
}

// Start implements backend.Backend: it starts the runner (Runner.Start),
// runs the node source, waits for its first nodes if it is a [Syncer],
// and brings those nodes up on the runner (Runner.NodeUp, concurrently);
// any error fails Start and undoes what it started.
func (b *Runtime) Start(ctx context.Context, exec backend.Executor) error {
	const op = "start backend"
	if exec == nil {
		return backend.Errorf(backend.InvalidArgument, op, "nil executor")
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
	}
	if b.starting {
		b.mu.Unlock()
		return backend.Errorf(backend.FailedPrecondition, op, "backend already started; a backend serves one cluster")
	}
	b.starting = true
	b.mu.Unlock()

	wrapped, err := b.runner.Start(ctx, exec, func(node string, cause error) { b.lost(node, cause) })
	if err != nil {
		b.mu.Lock()
		b.starting = false
		b.mu.Unlock()
		return err
	}
	srcDone, runErr := make(chan struct{}), make(chan error, 1)
	b.mu.Lock()
	b.srcDone = srcDone
	b.mu.Unlock()
	go func() {
		defer close(srcDone)
		err := b.source.Run(b.runCtx, (*sink)(b))
		runErr <- err
		if err != nil && b.runCtx.Err() == nil {
			b.log.Warn("cluster: node source stopped", "cause", err)
		}
	}()
	fail := func(err error) error {
		b.runStop()
		<-srcDone
		b.runner.Close() //nolint:errcheck // the start error is the one to report
		return err
	}
	if s, ok := b.source.(Syncer); ok {
		syncCtx, cancel := context.WithCancel(ctx)
		synced := make(chan error, 1)
		go func() { synced <- s.Synced(syncCtx) }()
		select {
		case err = <-synced:
		case err = <-runErr:
			if err == nil {
				err = backend.Errorf(backend.Internal, op, "node source stopped before it reported its nodes")
			}
			runErr <- err
		}
		cancel()
		if err != nil {
			return fail(backend.Wrap(backend.CodeOf(err), op+": sync nodes", err))
		}
	}
	b.mu.Lock()
	b.synced = true
	var initial []Node
	for _, n := range b.nodes {
		if n.alive {
			initial = append(initial, n.spec)
		}
	}
	b.mu.Unlock()
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range initial {
		g.Go(func() error { return b.runner.NodeUp(gctx, n) })
	}
	if err := g.Wait(); err != nil {
		return fail(backend.Wrap(backend.CodeOf(err), op+": start workers", err))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.started = true
	b.exec = wrapped
	b.pool = newPool(&b.wg, b.closedCh, 256)
	if !b.closed {
		b.schedule()
	}
	return nil
}

// precheck returns the error for calls on an unstarted or closed backend.
// b.mu must be held.
func (b *Runtime) precheck(op string) error {
	if b.closed {
		return backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
	}
	if !b.started {
		return backend.Errorf(backend.FailedPrecondition, op, "backend not started; pass it to ray.NewCluster")
	}
	return nil
}

// Close fails all queued and running work with ErrClosed, cancels the
// contexts of running user code and waits for it to return; then it stops
// the node source, ends every slice claim and closes the runner.
func (b *Runtime) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		<-b.shutdown
		return nil
	}
	b.closed = true
	close(b.closedCh)
	// Cancel the contexts of all running user code.
	for _, n := range b.nodes {
		for _, t := range n.running.ts {
			t.run.cancel()
		}
	}
	for _, a := range b.actors {
		if a.cancel != nil {
			a.cancel()
		}
	}
	closedErr := backend.Errorf(backend.FailedPrecondition, "close cluster", "%w", backend.ErrClosed)
	for _, o := range b.objects.all() {
		if !o.done {
			b.completeLocked(o, backend.Value{}, closedErr)
		}
	}
	for _, pg := range b.pgs {
		pg.signal()
	}
	for _, a := range b.actors {
		a.signalReady()
	}
	b.active = nil
	b.pendingPGs = nil
	claims := b.takeClaimsLocked()
	srcDone := b.srcDone
	b.mu.Unlock()
	defer close(b.shutdown)
	b.wg.Wait()
	b.runStop()
	if srcDone != nil {
		<-srcDone
	}
	b.endClaims(claims)
	b.bg.Wait()
	return b.runner.Close()
}
