package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/goray-dev/goray/backend"
)

// Host claims: TPU work outside slice reservations on a runner whose
// workers there hold no chips (ChipHolder false: on Kubernetes a node's
// CPU pod requests no google.com/tpu), when the source is a SliceClaimer
// and the runner a ClaimRunner.
//
// Such work (tasks, actors and placement group bundles asking for
// backend.TPU) is placed only on a host this driver has claimed. When it
// cannot be placed, the runtime claims a free host that could hold it:
// the host's slice is claimed as a one-host sub-slice (Claim.Subslice,
// shared with this driver's other sub-slice claims of the slice, so no
// other driver can claim the slice meanwhile), and ClaimRunner.Reserved
// starts the host's worker holding all of its chips (on Kubernetes, a pod
// requesting the host's google.com/tpu). Work on the host then runs in
// that worker, each piece with Ray's TPU_VISIBLE_CHIPS for its own chips
// (chips.go), as KubeRay's TPU worker pods and Ray's accelerator manager
// do. Once nothing has run on the host for Options.HostIdle, the claim ends:
// Released stops the worker and ReleaseSlices releases the slice.
//
// A host being claimed serves every request it could hold (one claim at a
// time per request); a request that still cannot be placed once the claim
// is granted claims another host. A claim refused because another driver
// holds the slice marks the slice held, as for slice reservations, and is
// tried again after Options.ClaimRetry; so is a claim that failed
// otherwise (logged as a warning with its cause).

type holdState int

const (
	holdClaiming holdState = iota
	holdHeld
	holdReleasing
)

// hostHold is this driver's claim of one TPU host for work outside slice
// reservations.
type hostHold struct {
	claim    Claim
	state    holdState
	reserved bool // ClaimRunner.Reserved succeeded: Released is owed
	// abandon: the node was lost or the runtime closed while the claim
	// was in flight; the claim ends as soon as it returns.
	abandon bool
	cancel  context.CancelFunc
	linger  *time.Timer
}

// needsHold reports whether a demand holds chips that only a claimed host
// can give (Runtime.hostClaims).
func (rt *Runtime) needsHold(demand []int64) bool {
	return rt.hostClaims && len(demand) > tpuCol && demand[tpuCol] > 0
}

// held reports whether n is claimed for work outside reservations.
func (n *node) held() bool { return n.hold != nil && n.hold.state == holdHeld }

// availForBundles returns a node's free resources for placing pg's
// bundles: with host claims, a host this driver has not claimed offers no
// chips (slice reservations' pinned groups take their hosts as they are).
func (rt *Runtime) availForBundles(pg *pgroup) func(*node) []int64 {
	if !rt.hostClaims || pg.pinned != nil {
		return func(n *node) []int64 { return n.free }
	}
	return func(n *node) []int64 {
		if n.spec.TPU == nil || n.held() || n.free[tpuCol] == 0 {
			return n.free
		}
		v := slices.Clone(n.free)
		v[tpuCol] = 0
		return v
	}
}

// kickHostClaims claims a host for each queued request that needs one
// and has none being claimed (see above). b.mu must be held.
func (rt *Runtime) kickHostClaims() {
	if !rt.hostClaims || rt.closed || !rt.started {
		return
	}
	for _, c := range rt.active {
		if c.len() > 0 && c.pl.Group == 0 && rt.needsHold(c.demand) {
			rt.claimHostFor(c.demand, c.sel)
		}
	}
	for _, pg := range rt.pendingPGs {
		if pg.state != pgPending || pg.pinned != nil {
			continue
		}
		for _, bu := range pg.bundles {
			if bu.node == nil && rt.needsHold(bu.demand) {
				rt.claimHostFor(bu.demand, bu.sel)
			}
		}
	}
}

// claimHostFor starts the claim of the first claimable host that could
// hold demand, unless a host that could is being claimed already. b.mu
// must be held.
func (rt *Runtime) claimHostFor(demand []int64, sel nodeMatcher) {
	var pick *node
	for _, n := range rt.nodes {
		if n.spec.TPU == nil || !sel.matches(n) || !fits(demand, n.capac) {
			continue
		}
		if n.hold != nil {
			if n.hold.state == holdClaiming && !n.hold.abandon {
				return // it serves this request too once granted
			}
			continue
		}
		if pick == nil && rt.claimable(n) {
			pick = n
		}
	}
	if pick != nil {
		rt.startHostClaim(pick)
	}
}

// claimable reports whether this driver could claim host n: alive, idle,
// its slice neither reserved nor being claimed nor known to be held by
// another driver, and n in none of its sub-slice claims. b.mu must be
// held.
func (rt *Runtime) claimable(n *node) bool {
	s := rt.slices.byNode[n]
	if s == nil || !n.alive || n.draining || n.restarting || n.free[tpuCol] != n.capac[tpuCol] ||
		s.reservedBy != nil || s.claiming || s.held {
		return false
	}
	return !s.subBusy[slices.Index(s.hosts, n)]
}

// startHostClaim claims host n on a goroutine Close waits for. b.mu must
// be held.
func (rt *Runtime) startHostClaim(n *node) {
	s := rt.slices.byNode[n]
	id := fmt.Sprintf("chips-%d", rt.newID())
	ctx, cancel := context.WithCancel(rt.runCtx)
	h := &hostHold{state: holdClaiming, cancel: cancel, claim: Claim{
		ID: id, Slices: []string{s.name}, Hosts: [][]string{{n.name}}, Handles: [][]any{{n.spec.Handle}}, Subslice: true,
	}}
	n.hold = h
	env := map[string]map[string]string{n.name: n.env}
	rt.log.Debug("cluster: claiming a TPU host for work outside slice reservations", "node", n.name, "slice", s.name, "claim", id)
	rt.bg.Go(func() {
		defer cancel()
		err := rt.claimer.ClaimSlices(ctx, h.claim)
		if err == nil && ctx.Err() != nil { // granted as it was given up
			rt.releaseClaim(h.claim, false)
			err = ctx.Err()
		}
		if err == nil {
			if err = rt.claimRunner.Reserved(ctx, h.claim, env); err != nil {
				rt.releaseClaim(h.claim, false)
			}
		}
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if err == nil {
			h.reserved = true
			if h.abandon || rt.closed || !n.alive {
				rt.endHoldLocked(n, h)
				return
			}
			h.state = holdHeld
			rt.schedule()
			rt.hostMaybeIdle(n)
			return
		}
		n.hold = nil
		if rt.closed {
			return
		}
		if h.abandon {
			// The node was lost meanwhile; work waiting for a host
			// looks again now that n is free of this claim.
			rt.schedule()
			return
		}
		if backend.CodeOf(err) == backend.ResourceExhausted {
			rt.log.Debug("cluster: TPU host held by another driver", "node", n.name, "slice", s.name, "cause", err)
		} else if !errors.Is(err, context.Canceled) {
			rt.log.Warn("cluster: claim a TPU host for work outside slice reservations (tried again)", "node", n.name, "slice", s.name, "cause", err)
		}
		// Either way the slice is left alone until the retry.
		s.held = true
		rt.armHeldRetry()
	})
}

// hostMaybeIdle ends n's hold after rt.hostIdle if nothing runs on n then.
// Called whenever work on a claimed host ends. b.mu must be held.
func (rt *Runtime) hostMaybeIdle(n *node) {
	h := n.hold
	if h == nil || h.state != holdHeld || rt.closed {
		return
	}
	if h.linger != nil {
		h.linger.Reset(rt.hostIdle)
		return
	}
	h.linger = time.AfterFunc(rt.hostIdle, func() {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if n.hold != h || h.state != holdHeld || rt.closed {
			return
		}
		if n.running.len() > 0 || len(n.actors) > 0 || len(n.bundles) > 0 {
			return // the next end of work arms it again
		}
		rt.endHoldLocked(n, h)
	})
}

// dropHoldLocked ends n's hold because n was lost: at once if granted,
// as soon as its claim returns if in flight. b.mu must be held.
func (rt *Runtime) dropHoldLocked(n *node) {
	switch h := n.hold; {
	case h == nil:
	case h.state == holdClaiming:
		h.abandon = true
		h.cancel()
	case h.state == holdHeld:
		rt.endHoldLocked(n, h)
	}
}

// endHoldLocked releases hold h of n on a goroutine Close waits for; n
// is claimable again once the release has returned. b.mu must be held.
func (rt *Runtime) endHoldLocked(n *node, h *hostHold) {
	h.state = holdReleasing
	if h.linger != nil {
		h.linger.Stop()
	}
	rt.bg.Go(func() {
		rt.releaseClaim(h.claim, h.reserved)
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if n.hold == h {
			n.hold = nil
		}
		if !rt.closed {
			rt.sliceHostFreed(n)
			rt.schedule()
		}
	})
}

// takeHoldsLocked takes every granted host hold, for Close to end with
// the claims; holds in flight end by themselves (they see the runtime
// closed). b.mu must be held.
func (rt *Runtime) takeHoldsLocked() []*claimHold {
	var out []*claimHold
	for _, n := range rt.nodes {
		h := n.hold
		if h == nil {
			continue
		}
		if h.state == holdClaiming {
			h.abandon = true
			continue
		}
		if h.state == holdHeld {
			if h.linger != nil {
				h.linger.Stop()
			}
			out = append(out, &claimHold{claim: h.claim, reserved: h.reserved})
			n.hold = nil
		}
	}
	return out
}
