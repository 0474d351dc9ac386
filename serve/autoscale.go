package serve

import (
	"context"
	"math"
	"time"
)

// scaler decides a deployment's replica target from the ongoing requests,
// with delays: the load must call for a change for UpscaleDelay (or
// DownscaleDelay) in a row before the target moves. It is a pure function
// of its inputs and the time it is given, so tests drive it with any clock.
type scaler struct {
	cfg                Autoscaling
	min, max           int
	upSince, downSince time.Time
}

// decide returns the new target given the ongoing requests (in flight plus
// queued) and the current target, at time now.
func (s *scaler) decide(now time.Time, ongoing int, current int) int {
	desired := int(math.Ceil(float64(ongoing) / s.cfg.TargetOngoingRequests))
	desired = min(max(desired, s.min), s.max)
	switch {
	case desired > current:
		s.downSince = time.Time{}
		if s.upSince.IsZero() {
			s.upSince = now
		}
		if now.Sub(s.upSince) >= s.cfg.UpscaleDelay {
			s.upSince = time.Time{}
			return desired
		}
	case desired < current:
		s.upSince = time.Time{}
		if s.downSince.IsZero() {
			s.downSince = now
		}
		if now.Sub(s.downSince) >= s.cfg.DownscaleDelay {
			s.downSince = time.Time{}
			return desired
		}
	default:
		s.upSince, s.downSince = time.Time{}, time.Time{}
	}
	return current
}

// autoscale samples the load every Interval and moves the target.
func (d *deployment) autoscale(ctx context.Context) {
	t := time.NewTicker(d.spec.Autoscaling.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		ongoing := len(d.waiters)
		for _, r := range d.replicas {
			if r.state == stateReady || r.state == stateDraining {
				ongoing += r.ongoing
			}
		}
		if d.rolling {
			// A rolling update sets the target until it is done.
			d.mu.Unlock()
			continue
		}
		if n := d.scaler.decide(time.Now(), ongoing, d.target); n != d.target && !d.closing {
			d.s.log.Info("serve: autoscale", "deployment", d.spec.Name, "from", d.target, "to", n, "ongoing", ongoing)
			d.target = n
			d.reconcileLocked()
		}
		d.mu.Unlock()
	}
}

// healthLoop checks the ready replicas every Period.
func (d *deployment) healthLoop(ctx context.Context) {
	t := time.NewTicker(d.spec.Health.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.checkHealth(ctx)
	}
}
