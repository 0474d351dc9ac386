package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/goray-dev/goray/ray"
)

// A replica's life: starting (waiting for a free slice, then starting its
// workers) → ready (routed to) → draining (no new requests; removed once
// its requests finish) → stopping (workers stopped, slice released) →
// gone. A replica whose host dies or whose health checks fail goes
// straight to stopping, and the deployment starts a replacement on a fresh
// reservation.
type replicaState int

const (
	stateStarting replicaState = iota
	stateReady
	stateDraining
	stateStopping
)

var replicaStateNames = [...]string{"STARTING", "READY", "DRAINING", "STOPPING"}

func (s replicaState) String() string { return replicaStateNames[s] }

// replica is one slice-owning replica. Fields below mu are guarded by
// its deployment's mu.
type replica struct {
	d       *deployment // the version it belongs to
	id      string
	created time.Time // when the scale decision asked for it
	ctx     context.Context
	cancel  context.CancelFunc // ends its start, watchers and checks

	state    replicaState
	ongoing  int
	served   int64
	failures int       // health checks failed in a row
	checking bool      // a health check of it is running
	spg      placement // its slices, or its chips (ChipsPerReplica)
	inst     instance
	slices   []string
	hosts    []string
	readyAt  time.Time
	firstReq bool          // a request was routed to it, or it is not timed
	drained  chan struct{} // closed when draining and idle
	reason   string        // why it is stopping
	stopped  bool          // stop has begun
	released bool          // its slice was given back
	// holdSlice keeps a failed replica's slice until its replacement has
	// reserved one, so that the replacement lands on a fresh slice.
	holdSlice bool
	// models are the models loaded or loading on it (multiplexed
	// deployments), least recently used first by their used stamp.
	models []*modelSlot
}

// hostWatch runs on every host of a ready replica for as long as the
// replica holds its slice. It returns only when its context ends (the
// reservation was released) or fails when its host dies, which tells the
// router at once that the replica lost a host.
var hostWatch = ray.NewTask("serve.hostWatch", func(ctx context.Context, _ struct{}) (struct{}, error) {
	<-ctx.Done()
	return struct{}{}, ctx.Err()
})

// reconcileLocked starts or removes replicas until the active ones
// (starting or ready) match the target. d.mu must be held.
func (d *deployment) reconcileLocked() {
	if d.closing {
		return
	}
	active := 0
	for _, r := range d.replicas {
		if r.state == stateStarting || r.state == stateReady {
			active++
		}
	}
	for ; active < d.target; active++ {
		if time.Now().Before(d.retryAt) {
			d.scheduleRetryLocked()
			break
		}
		d.startReplicaLocked()
	}
	for ; active > d.target; active-- {
		d.removeOneLocked()
	}
	d.changedLocked()
}

// startReplicaLocked adds a starting replica and runs its start in the
// background, so that waiting for a slice never blocks traffic.
func (d *deployment) startReplicaLocked() {
	d.seq++
	ctx, cancel := context.WithCancel(d.ctx)
	// The time to first request is measured for scale-ups and
	// replacements, not for the replicas a deployment starts with.
	id := fmt.Sprintf("%s-%d", d.spec.Name, d.seq)
	if d.version > 1 {
		id = fmt.Sprintf("%s-v%d-%d", d.spec.Name, d.version, d.seq) // beside the old version's while they overlap
	}
	r := &replica{d: d, id: id, created: time.Now(), ctx: ctx, cancel: cancel, firstReq: !d.deployed}
	d.replicas = append(d.replicas, r)
	d.wg.Go(func() { d.runReplica(r) })
}

// removeOneLocked removes a replica for a scale-down: a starting one if
// any (its reservation is abandoned), else the ready one with the fewest
// requests, which drains first. d.mu must be held.
func (d *deployment) removeOneLocked() {
	var victim *replica
	for _, r := range d.replicas {
		if r.state == stateStarting {
			victim = r
		}
	}
	if victim != nil {
		victim.state, victim.reason = stateStopping, "scaled down before it was ready"
		victim.cancel()
		return
	}
	for _, r := range d.replicas {
		if r.state == stateReady && (victim == nil || r.ongoing < victim.ongoing) {
			victim = r
		}
	}
	if victim != nil {
		d.drainLocked(victim, "scaled down")
	}
}

// drainLocked stops routing to r and removes it once its requests are
// done (or DrainTimeout passed). d.mu must be held.
func (d *deployment) drainLocked(r *replica, reason string) {
	r.state, r.reason = stateDraining, reason
	drained := make(chan struct{})
	if r.ongoing == 0 {
		close(drained)
	} else {
		r.drained = drained
	}
	d.wg.Go(func() {
		t := time.NewTimer(d.spec.DrainTimeout)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
		case <-d.forced:
		}
		d.stop(r, reason)
	})
}

// runReplica reserves r's slice, starts its workers and makes it ready.
func (d *deployment) runReplica(r *replica) {
	var spg placement
	var err error
	if len(d.spec.Resources) > 0 {
		spg, err = reserveResources(r.ctx, d.s.c, &d.spec, r.id)
		if err != nil {
			d.startFailed(r, fmt.Errorf("reserve %v on one node: %w", d.spec.Resources, err))
			return
		}
	} else if d.spec.ChipsPerReplica > 0 {
		spg, err = reserveChips(r.ctx, d.s.c, &d.spec, r.id)
		if err != nil {
			d.startFailed(r, fmt.Errorf("reserve %d chips of a %s %s host: %w", d.spec.ChipsPerReplica, d.spec.Accelerator, d.spec.Topology, err))
			return
		}
	} else {
		spg, err = ray.NewSlicePlacementGroup(r.ctx, d.s.c, d.spec.sliceSpec(r.id))
		if err != nil {
			d.startFailed(r, fmt.Errorf("reserve a %s %s slice: %w", d.spec.Accelerator, d.spec.Topology, err))
			return
		}
	}
	d.mu.Lock()
	r.spg, r.slices, r.hosts = spg, spg.SliceNames(), spg.Hosts()
	close(d.reserved)
	d.reserved = make(chan struct{})
	d.changedLocked()
	d.mu.Unlock()
	inst, err := d.spec.Replica.start(r.ctx, d.s.c, spg, d.spec.MaxConcurrentRequests)
	if err != nil {
		d.startFailed(r, fmt.Errorf("start on slice %v: %w", r.slices, err))
		return
	}
	d.mu.Lock()
	r.inst = inst
	if r.state != stateStarting || d.closing {
		d.mu.Unlock()
		d.stop(r, "")
		return
	}
	r.state, r.readyAt, d.served = stateReady, time.Now(), true
	d.s.metrics.dep(d.spec.Name).replicaStarts.Inc()
	d.retryAt, d.backoff, d.lastErr = time.Time{}, 0, nil
	d.dispatchLocked()
	d.changedLocked()
	prev := d.prev
	d.mu.Unlock()
	prev.dispatch() // the version before d queues for d's replicas too
	d.s.log.Info("serve: replica ready", "replica", r.id, "slices", r.slices, "hosts", r.hosts, "after", time.Since(r.created))
	pg, per := spg.PlacementGroup(), spg.BundlesPerHost()
	for i, host := range r.hosts {
		ref := hostWatch.Remote(r.ctx, d.s.c, struct{}{}, ray.InBundle(pg, i*per), ray.Resources{ray.CPU: 0}, ray.Retries(0))
		d.wg.Go(func() {
			_, err := ref.Get(r.ctx)
			if r.ctx.Err() == nil {
				d.lost(r, fmt.Sprintf("host %s lost: %v", host, err), false)
			}
		})
	}
}

// startFailed removes a replica that could not start and retries later
// with a growing backoff.
func (d *deployment) startFailed(r *replica, err error) {
	d.mu.Lock()
	stopping := r.state == stateStopping || d.closing
	if !stopping {
		r.state = stateStopping
		d.lastErr = err
		d.backoff = min(max(2*d.backoff, 100*time.Millisecond), 30*time.Second)
		d.retryAt = time.Now().Add(d.backoff)
	}
	d.mu.Unlock()
	if !stopping {
		d.s.log.Warn("serve: replica failed to start", "replica", r.id, "err", err)
	}
	d.stop(r, err.Error())
}

// scheduleRetryLocked reconciles again once the start backoff ends.
// d.mu must be held.
func (d *deployment) scheduleRetryLocked() {
	if d.retryTimer != nil {
		return
	}
	d.retryTimer = time.AfterFunc(time.Until(d.retryAt), func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.retryTimer = nil
		d.reconcileLocked()
	})
}

// lost takes r out of routing at once (its host died, its actor died or
// its health checks failed), stops it and starts a replacement. With hold,
// r's slice is kept until the replacement has reserved another (or
// holdTimeout passes), so that a slice that failed its checks is not
// picked again at once; a slice with a dead host is never picked again, so
// it needs no hold.
func (d *deployment) lost(r *replica, reason string, hold bool) {
	d.mu.Lock()
	if r.state == stateStopping {
		d.mu.Unlock()
		return
	}
	r.state, r.reason, r.holdSlice = stateStopping, reason, hold
	d.closeDrainedLocked(r)
	d.failures++
	if d.outageLocked() {
		// The last ready replica: the queued requests would wait for
		// the replacements; they are refused now, as new ones are.
		d.failQueueLocked(ErrNoReplica)
	}
	d.reconcileLocked()
	closing := d.closing
	if !closing {
		// Added under d.mu while not closing: shutdown's Wait comes after.
		d.wg.Add(1)
	}
	d.mu.Unlock()
	d.s.metrics.dep(d.spec.Name).replicaFailures.Inc()
	d.s.log.Warn("serve: replica lost", "replica", r.id, "reason", reason)
	if closing {
		d.stop(r, reason)
		return
	}
	go func() {
		defer d.wg.Done()
		d.stop(r, reason)
	}()
}

// stop stops r's workers, releases its slice and forgets it.
func (d *deployment) stop(r *replica, reason string) {
	d.mu.Lock()
	if r.stopped {
		d.mu.Unlock()
		return
	}
	r.state, r.stopped = stateStopping, true
	if reason != "" && r.reason == "" {
		r.reason = reason
	}
	inst, spg, hold, reserved := r.inst, r.spg, r.holdSlice && !d.closing, d.reserved
	d.closeDrainedLocked(r)
	d.mu.Unlock()
	r.cancel()
	ctx := context.WithoutCancel(d.ctx)
	if inst != nil {
		unloadModels(ctx, inst)
		inst.close(ctx)
	}
	if hold && spg != nil {
		t := time.NewTimer(d.holdTimeout())
		select {
		case <-reserved:
		case <-t.C:
		case <-d.forced:
		case <-d.ctx.Done():
		}
		t.Stop()
	}
	if spg != nil {
		if err := spg.Release(ctx); err != nil && !errors.Is(err, ray.ErrClosed) {
			d.s.log.Warn("serve: release slice", "replica", r.id, "err", err)
		}
	}
	d.mu.Lock()
	r.released = true
	for i, x := range d.replicas {
		if x == r {
			d.replicas = append(d.replicas[:i], d.replicas[i+1:]...)
			break
		}
	}
	d.reconcileLocked()
	d.changedLocked()
	d.mu.Unlock()
	d.s.log.Debug("serve: replica stopped", "replica", r.id, slog.String("reason", r.reason))
}

// checkHealth starts a health check of each ready replica whose last
// check has ended: a check that hangs until its Timeout holds up no other
// replica's (each runs on its own goroutine), and its replica is checked
// again only after it ends. ctx is the health loop's: its end ends the
// checks in flight.
func (d *deployment) checkHealth(ctx context.Context) {
	d.mu.Lock()
	var due []*replica
	for _, r := range d.replicas {
		if r.state == stateReady && !r.checking {
			r.checking = true
			due = append(due, r)
		}
	}
	d.mu.Unlock()
	for _, r := range due {
		d.loops.Go(func() { d.checkReplica(ctx, r) })
	}
}

// checkReplica runs one health check of r and counts its failures in a
// row; FailureThreshold of them replace it.
func (d *deployment) checkReplica(ctx context.Context, r *replica) {
	cctx, cancel := context.WithTimeout(r.ctx, d.spec.Health.Timeout)
	stop := context.AfterFunc(ctx, cancel)
	err := r.inst.check(cctx)
	stop()
	cancel()
	d.mu.Lock()
	r.checking = false
	if ctx.Err() != nil || r.ctx.Err() != nil {
		d.mu.Unlock()
		return
	}
	if err == nil {
		r.failures = 0
		d.mu.Unlock()
		return
	}
	r.failures++
	failed := r.failures >= d.spec.Health.FailureThreshold
	d.mu.Unlock()
	d.s.log.Info("serve: health check failed", "replica", r.id, "err", err)
	if failed {
		d.lost(r, fmt.Sprintf("%d health checks failed in a row, last: %v", d.spec.Health.FailureThreshold, err), true)
	}
}

// holdTimeout bounds how long a failed replica keeps its slice for its
// replacement to find another.
func (d *deployment) holdTimeout() time.Duration {
	return max(time.Second, d.spec.Health.Period*time.Duration(d.spec.Health.FailureThreshold))
}
