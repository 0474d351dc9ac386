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
func (rt *Runtime) Start(ctx context.Context, exec backend.Executor) error {
	const op = "start backend"
	if exec == nil {
		return backend.Errorf(backend.InvalidArgument, op, "nil executor")
	}
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
	}
	if rt.starting {
		rt.mu.Unlock()
		return backend.Errorf(backend.FailedPrecondition, op, "backend already started; a backend serves one cluster")
	}
	rt.starting = true
	rt.mu.Unlock()

	wrapped, err := rt.runner.Start(ctx, exec, func(node string, cause error) { rt.lost(node, cause) })
	if err != nil {
		rt.mu.Lock()
		rt.starting = false
		rt.mu.Unlock()
		return err
	}
	srcDone, runErr := make(chan struct{}), make(chan error, 1)
	rt.mu.Lock()
	rt.srcDone = srcDone
	rt.mu.Unlock()
	go func() {
		defer close(srcDone)
		err := rt.source.Run(rt.runCtx, (*sink)(rt))
		runErr <- err
		if err != nil && rt.runCtx.Err() == nil {
			rt.log.Warn("cluster: node source stopped", "cause", err)
		}
	}()
	fail := func(err error) error {
		rt.runStop()
		<-srcDone
		rt.runner.Close() //nolint:errcheck // the start error is the one to report
		return err
	}
	if s, ok := rt.source.(Syncer); ok {
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
	rt.mu.Lock()
	rt.synced = true
	var initial []Node
	for _, n := range rt.nodes {
		if n.alive {
			initial = append(initial, n.spec)
		}
	}
	rt.mu.Unlock()
	g, gctx := errgroup.WithContext(ctx)
	for _, n := range initial {
		g.Go(func() error { return rt.runner.NodeUp(gctx, n) })
	}
	if err := g.Wait(); err != nil {
		return fail(backend.Wrap(backend.CodeOf(err), op+": start workers", err))
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.started = true
	rt.exec = wrapped
	rt.starter, _ = wrapped.(backend.TaskStarter)
	rt.pool = newPool(&rt.wg, rt.closedCh, 256)
	if !rt.closed {
		rt.schedule()
		rt.startWaitWatch()
	}
	return nil
}

// precheck returns the error for calls on an unstarted or closed backend.
// b.mu must be held.
func (rt *Runtime) precheck(op string) error {
	if rt.closed {
		return backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
	}
	if !rt.started {
		return backend.Errorf(backend.FailedPrecondition, op, "backend not started; pass it to ray.NewCluster")
	}
	return nil
}

// Close fails all queued and running work with ErrClosed, cancels the
// contexts of running user code and waits for it to return; then it stops
// the node source, ends every slice claim and closes the runner.
func (rt *Runtime) Close() error {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		<-rt.shutdown
		return nil
	}
	rt.closed = true
	close(rt.closedCh)
	// Cancel the contexts of all running user code.
	for _, n := range rt.nodes {
		for _, t := range n.running.ts {
			t.run().cancel()
		}
	}
	for _, a := range rt.actors {
		if a.cancel != nil {
			a.cancel()
		}
	}
	closedErr := backend.Errorf(backend.FailedPrecondition, "close cluster", "%w", backend.ErrClosed)
	for _, o := range rt.objects.all() {
		if !o.done {
			rt.completeLocked(o, backend.Value{}, closedErr)
		}
	}
	for _, pg := range rt.pgs {
		pg.signal()
	}
	for _, a := range rt.actors {
		a.signalReady()
	}
	rt.active = nil
	rt.pendingPGs = nil
	claims := append(rt.takeClaimsLocked(), rt.takeHoldsLocked()...)
	srcDone := rt.srcDone
	rt.mu.Unlock()
	defer close(rt.shutdown)
	rt.wg.Wait()
	rt.runStop()
	if srcDone != nil {
		<-srcDone
	}
	rt.endClaims(claims)
	rt.bg.Wait()
	return rt.runner.Close()
}
