package cluster

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// releaseTimeout bounds one ReleaseSlices call.
const releaseTimeout = 30 * time.Second

// claimHold is a granted claim, held by its reservation's group.
type claimHold struct {
	claim    Claim
	reserved bool // ClaimRunner.Reserved succeeded: Released is owed
}

// pickedClaim is what a request picked under b.mu (whole slices or one
// sub-slice) needs to be claimed outside it and then granted.
type pickedClaim struct {
	op    string
	id    backend.PlacementGroupID // the reservation's group
	claim Claim
	env   map[string]map[string]string // each host's env, for ClaimRunner.Reserved
	// derive, if set, sets env once the source has claimed the slices:
	// the runner may name hosts by what the claim made (HostNamer).
	derive func() error
	// unpick makes what was picked pickable again and serves the pool;
	// grant grants it as the group id. b.mu is held for derive, unpick
	// and grant.
	unpick func()
	grant  func() *backend.SliceReservation
	// broken reports whether a host of what was picked is down now (a
	// slice that lost a node while it was claimed); b.mu is held.
	broken func() bool
}

// claimPicked claims, outside b.mu, the whole slices serveSlices picked
// for w (the source is a SliceClaimer), then grants them (claimAndGrant).
// b.mu is held on entry and on return.
func (rt *Runtime) claimPicked(ctx context.Context, op string, p *shapePool, w *sliceWait) (_ *backend.SliceReservation, _ error, again bool) {
	picked := w.picked
	w.picked = nil
	id := backend.PlacementGroupID(rt.newID())
	claim := claimOf(id, picked)
	var names [][]string
	pc := &pickedClaim{
		op: op, id: id, claim: claim,
		unpick: func() { rt.unpick(p, picked) },
		broken: func() bool { return slices.ContainsFunc(picked, func(s *tpuSlice) bool { return s.dead > 0 }) },
		grant: func() *backend.SliceReservation {
			for _, s := range picked {
				s.claiming = false
			}
			return rt.grantSlices(w, picked, id, names)
		},
	}
	// After the claim: Kubernetes names a host by the capacity pod that
	// becomes its worker pod, which the claim decides.
	pc.derive = func() error {
		var err error
		if names, err = rt.hostNames(claim); err == nil {
			pc.env = hostEnvOf(picked, names)
		}
		return err
	}
	return rt.claimAndGrant(ctx, p, w, pc)
}

// claimAndGrant claims pc outside b.mu, tells the runner (a ClaimRunner),
// then grants the reservation. If another driver holds some of the
// slices, it marks them held, queues w again at the head of its pool and
// reports again; so it does when the claim or the runner failed while a
// host of what was picked went down (a node pool scaled away or a Spot
// slice preempted under the claim), as other capacity may serve w. Any
// other error releases what was claimed and fails the request. What was
// picked stays unpickable until the claim has ended.
// b.mu is held on entry and on return.
func (rt *Runtime) claimAndGrant(ctx context.Context, p *shapePool, w *sliceWait, pc *pickedClaim) (_ *backend.SliceReservation, _ error, again bool) {
	if err := rt.gaveUpClaim(ctx, pc.op, p, w); err != nil {
		pc.unpick()
		return nil, err, false
	}
	claim := pc.claim
	// Close waits for the claim (and its release, if the cluster closed
	// meanwhile) before it closes the runner, and cuts it short.
	rt.bg.Add(1)
	defer rt.bg.Done()
	cctx, cancel := context.WithCancel(ctx)
	defer context.AfterFunc(rt.runCtx, cancel)()
	defer cancel()
	rt.mu.Unlock()
	err := rt.claimer.ClaimSlices(cctx, claim)
	if err == nil && pc.derive != nil {
		rt.mu.Lock()
		err = pc.derive()
		rt.mu.Unlock()
		if err != nil {
			rt.releaseClaim(claim, false)
		}
	}
	reserved := false
	if err == nil && rt.claimRunner != nil && cctx.Err() == nil {
		if err = rt.claimRunner.Reserved(cctx, claim, pc.env); err != nil {
			rt.releaseClaim(claim, false)
		}
		reserved = err == nil
	}
	rt.mu.Lock()
	if err == nil {
		if gerr := rt.gaveUpClaim(ctx, pc.op, p, w); gerr != nil {
			// Released before it is pickable again, so that this driver
			// never claims what its previous claim still holds.
			rt.mu.Unlock()
			rt.releaseClaim(claim, reserved)
			rt.mu.Lock()
			pc.unpick()
			return nil, gerr, false
		}
		r := pc.grant()
		rt.pgs[pc.id].claim = &claimHold{claim: claim, reserved: reserved}
		return r, nil, false
	}
	held := backend.CodeOf(err) == backend.ResourceExhausted
	if (held || pc.broken()) && !rt.closed && ctx.Err() == nil {
		if held {
			var he *HeldError
			names := claim.Slices // without a HeldError, all of them
			if errors.As(err, &he) && len(he.Slices) > 0 {
				names = he.Slices
			}
			for _, s := range p.all {
				if slices.Contains(names, s.name) {
					s.held = true
				}
			}
			rt.log.Debug("cluster: slices held by another driver", "slices", names, "cause", err)
			rt.armHeldRetry()
		} else {
			rt.log.Info("cluster: a host of the picked slices went down during the claim; the request waits for other slices", "op", pc.op, "cause", err)
		}
		// Queued again at the head, w is served first: it may get other
		// slices at once.
		w.done = make(chan struct{})
		p.waiting = slices.Insert(p.waiting, 0, w)
		pc.unpick()
		return nil, nil, true
	}
	pc.unpick()
	if gerr := rt.gaveUpClaim(ctx, pc.op, p, w); gerr != nil {
		if err != nil {
			// What the claim or the runner was doing when the caller gave
			// up (a Kubernetes reservation waiting for Kueue's admission
			// says where it stands).
			gerr = fmt.Errorf("%w; %v", gerr, err)
		}
		return nil, gerr, false
	}
	return nil, backend.Wrap(backend.CodeOf(err), pc.op+": claim slices", err), false
}

// gaveUpClaim is the error of a claimed request whose caller gave up or
// whose cluster closed, or nil. b.mu must be held.
func (rt *Runtime) gaveUpClaim(ctx context.Context, op string, p *shapePool, w *sliceWait) error {
	if rt.closed {
		return backend.Errorf(backend.FailedPrecondition, op, "%w", backend.ErrClosed)
	}
	if ctx.Err() != nil {
		return gaveUp(op, p, w, 0, ctx.Err())
	}
	return nil
}

// unpick returns slices picked for a claim to their pool's free heap and
// serves the pool. b.mu must be held.
func (rt *Runtime) unpick(p *shapePool, picked []*tpuSlice) {
	for _, s := range picked {
		s.claiming = false
		heap.Push(&p.free, s)
	}
	rt.serveSlices(p)
}

// handlesOf returns the sources' handles of hosts (Node.Handle).
func handlesOf(hosts []*node) []any {
	hs := make([]any, len(hosts))
	for i, h := range hosts {
		hs[i] = h.spec.Handle
	}
	return hs
}

// claimOf builds the claim of picked slices.
func claimOf(id backend.PlacementGroupID, picked []*tpuSlice) Claim {
	c := Claim{ID: id.String(), Slices: make([]string, 0, len(picked)), Hosts: make([][]string, 0, len(picked))}
	for _, s := range picked {
		c.Slices = append(c.Slices, s.name)
		c.Hosts = append(c.Hosts, slices.Clone(s.hostNames()))
		c.Handles = append(c.Handles, handlesOf(s.hosts))
	}
	return c
}

// hostNames returns the names the hosts of c are reached by: the
// runner's (HostNamer), or the node names.
func (rt *Runtime) hostNames(c Claim) ([][]string, error) {
	n, ok := rt.claimRunner.(HostNamer)
	if !ok {
		return c.Hosts, nil
	}
	names := n.HostNames(c)
	// Every env of the claim is built from these names (TPU_WORKER_
	// HOSTNAMES, the coordinators): one name per host, none empty or
	// repeated, or the claim fails here instead of handing out an env
	// that names the wrong hosts or none.
	bad := len(names) != len(c.Hosts)
	seen := map[string]bool{}
	for i := 0; !bad && i < len(names); i++ {
		bad = len(names[i]) != len(c.Hosts[i])
		for _, name := range names[i] {
			bad = bad || name == "" || seen[name]
			seen[name] = true
		}
	}
	if bad {
		return nil, backend.Errorf(backend.Internal, "claim "+c.ID,
			"the runner's HostNames gave %q for hosts %q: want one distinct, non-empty name per host", names, c.Hosts)
	}
	return names, nil
}

// hostEnvOf returns each host's env (by node name) of picked slices whose
// hosts are reached by names (names[i][j] for host j of slice i).
func hostEnvOf(picked []*tpuSlice, names [][]string) map[string]map[string]string {
	env := map[string]map[string]string{}
	coordinator := names[0][0]
	for si, s := range picked {
		for wid, h := range s.hosts {
			e := maps.Clone(s.workerEnv(wid, names[si]))
			if len(picked) > 1 {
				// Cannot fail: si < len(picked), the port is the default
				// and the coordinator a checked host name (hostNames).
				ms, _ := tpu.MultisliceEnv(coordinator, tpu.DefaultMegascalePort, len(picked), si)
				maps.Copy(e, ms)
			}
			env[h.name] = e
		}
	}
	return env
}

// armHeldRetry makes slices held elsewhere available again after the
// claim retry delay. b.mu must be held.
func (rt *Runtime) armHeldRetry() {
	if rt.heldTimer != nil || rt.closed {
		return
	}
	rt.heldTimer = time.AfterFunc(rt.claimRetry, func() {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		rt.heldTimer = nil
		if rt.closed {
			return
		}
		for _, p := range rt.slices.order {
			for _, s := range p.all {
				s.held = false
			}
			rt.serveSlices(p)
		}
		rt.schedule() // host claims too (hostclaim.go)
	})
}

// endClaimLocked ends the claim of a released reservation (of whole
// slices or a sub-slice), on a goroutine Close waits for, and reports
// whether it did: free, which makes what the reservation held pickable
// again, is then called under b.mu once the claim has ended (unless the
// cluster closed meanwhile), so that this driver never claims a slice or
// host whose previous claim is still being released. b.mu must be held.
func (rt *Runtime) endClaimLocked(pg *pgroup, free func()) bool {
	h := pg.claim
	if h == nil || rt.closed { // once closed, Close has taken the claims
		return false
	}
	pg.claim = nil
	rt.bg.Go(func() {
		rt.releaseClaim(h.claim, h.reserved)
		rt.mu.Lock()
		defer rt.mu.Unlock()
		if !rt.closed {
			free()
		}
	})
	return true
}

// takeClaimsLocked takes every granted claim, for Close to end, and stops
// the held-slice retry. b.mu must be held.
func (rt *Runtime) takeClaimsLocked() []*claimHold {
	if rt.heldTimer != nil {
		rt.heldTimer.Stop()
		rt.heldTimer = nil
	}
	var out []*claimHold
	for _, id := range sortedKeys(rt.pgs) {
		if pg := rt.pgs[id]; pg.claim != nil {
			out = append(out, pg.claim)
			pg.claim = nil
		}
	}
	return out
}

// endClaims ends claims Close took.
func (rt *Runtime) endClaims(claims []*claimHold) {
	for _, h := range claims {
		rt.releaseClaim(h.claim, h.reserved)
	}
}

// releaseClaim tells the runner the reservation ended (if it was told it
// began), then releases the claim.
func (rt *Runtime) releaseClaim(c Claim, reserved bool) {
	if reserved {
		rt.claimRunner.Released(c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := rt.claimer.ReleaseSlices(ctx, c); err != nil {
		rt.log.Warn("cluster: release slice claim", "claim", c.ID, "slices", c.Slices, "cause", err)
	}
}
