package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"
)

// Work that waits says so. A slice reservation, a placement group, or a
// task or actor queued for resources that has not started within
// Options.WaitWarning is logged once at level Warn, naming what waits,
// for how long and why (in the words the Infeasible and timeout errors
// use); while it keeps waiting it is logged again at twice the age, four
// times, and so on, at most every maxWaitWarnGap.
//
// Nothing is added to the task path: one goroutine looks at the queues
// every tick, under the lock. Slice requests carry the time they were
// queued. Tasks and placement groups carry only their queue sequence
// number (Runtime.seq, which enqueue sets anyway), so the watcher keeps a
// clock of the sequence numbers it saw at each tick (seqClock): a request
// of sequence s was queued no later than the first tick that saw a
// number >= s. Its age is known to within a tick.

// DefaultWaitWarning is how long work may wait to start before the
// runtime logs a warning about it, when Options.WaitWarning is 0.
const DefaultWaitWarning = 10 * time.Second

// maxWaitWarnGap bounds the backoff between two warnings about the same
// waiting work (unless Options.WaitWarning is longer).
const maxWaitWarnGap = 5 * time.Minute

// waitStatusTimeout bounds the call of a waiting reservation's
// provisioning status (the cluster's answer), made outside the lock.
const waitStatusTimeout = 2 * time.Second

// waitWarnMsg is the message of every waiting-work warning.
const waitWarnMsg = "cluster: work waits to start"

// warnState is when to warn next about one waiting request.
type warnState struct {
	next time.Duration // the age at which to warn next; 0 means the threshold
}

// due reports whether a request that has waited age is due a warning,
// and if so moves the next one out: to twice the age, at most gap later.
func (s *warnState) due(age, threshold time.Duration) bool {
	if age < threshold {
		*s = warnState{} // it (or the head of its queue) is new again
		return false
	}
	if s.next == 0 {
		s.next = threshold
	}
	if age < s.next {
		return false
	}
	s.next = age + min(age, max(maxWaitWarnGap, threshold))
	return true
}

// seqClock maps queue sequence numbers to the time they were first seen,
// one sample per tick that saw new numbers, the last seqClockSamples.
type seqClock struct {
	seqs  []uint64
	times []time.Time
}

const seqClockSamples = 4096

// mark records that every sequence number up to seq existed at now.
func (c *seqClock) mark(seq uint64, now time.Time) {
	if n := len(c.seqs); n > 0 && c.seqs[n-1] == seq {
		return
	}
	if len(c.seqs) == seqClockSamples {
		// Drop the older half; the oldest kept sample still bounds the
		// age of anything older from below.
		half := seqClockSamples / 2
		c.seqs = append(c.seqs[:0], c.seqs[half:]...)
		c.times = append(c.times[:0], c.times[half:]...)
	}
	c.seqs = append(c.seqs, seq)
	c.times = append(c.times, now)
}

// since returns when sequence number seq was first seen, or ok false if
// no tick has seen it yet.
func (c *seqClock) since(seq uint64) (time.Time, bool) {
	i := sort.Search(len(c.seqs), func(i int) bool { return c.seqs[i] >= seq })
	if i == len(c.seqs) {
		return time.Time{}, false
	}
	return c.times[i], true
}

// waitWarning is one line to log, built under the lock.
type waitWarning struct {
	what   string
	age    time.Duration
	reason string
	// status, if set, adds what the cluster answered to a request for
	// capacity; it is called without the lock.
	status func(ctx context.Context) string
}

// waitTick is how often the watcher looks at the queues for threshold.
func waitTick(threshold time.Duration) time.Duration {
	return min(max(threshold/4, 5*time.Millisecond), time.Second)
}

// startWaitWatch starts the watcher unless warnings are off or nobody
// listens. b.mu must be held; Close waits for it (Runtime.bg).
func (rt *Runtime) startWaitWatch() {
	if rt.waitWarn <= 0 || !rt.log.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	rt.bg.Add(1)
	go func() {
		defer rt.bg.Done()
		tick := time.NewTicker(waitTick(rt.waitWarn))
		defer tick.Stop()
		for {
			select {
			case <-rt.closedCh:
				return
			case now := <-tick.C:
				rt.warnWaits(now)
			}
		}
	}()
}

// warnWaits logs the waiting work that is due a warning at now.
func (rt *Runtime) warnWaits(now time.Time) {
	rt.mu.Lock()
	if rt.closed {
		rt.mu.Unlock()
		return
	}
	rt.waitClock.mark(rt.seq, now)
	warns := rt.dueWaits(now)
	rt.mu.Unlock()
	for _, w := range warns {
		reason := w.reason
		if w.status != nil {
			ctx, cancel := context.WithTimeout(context.Background(), waitStatusTimeout)
			if st := w.status(ctx); st != "" {
				reason += "; " + st
			}
			cancel()
		}
		rt.log.Warn(waitWarnMsg, "waiting", w.what, slog.Duration("for", w.age.Round(time.Millisecond)), "reason", reason)
	}
}

// dueWaits collects the warnings due at now: slice requests, then
// placement groups, then queued tasks and actors. b.mu must be held.
func (rt *Runtime) dueWaits(now time.Time) []waitWarning {
	var out []waitWarning
	for _, p := range rt.slices.order {
		for i, w := range p.waiting {
			age := now.Sub(w.since)
			if !w.warn.due(age, rt.waitWarn) {
				continue
			}
			out = append(out, waitWarning{
				what: fmt.Sprintf("slice reservation %q of %s", w.req.Name, askedSlices(w)), age: age,
				reason: slicePoolPhrase(p, i) + slicesHeldPhrase(p), status: w.status,
			})
		}
	}
	age := func(seq uint64) time.Duration {
		at, ok := rt.waitClock.since(seq)
		if !ok {
			return 0
		}
		return now.Sub(at)
	}
	for _, pg := range rt.pendingPGs {
		if pg.state != pgPending {
			continue
		}
		a := age(pg.seq)
		if !pg.warn.due(a, rt.waitWarn) {
			continue
		}
		out = append(out, waitWarning{what: pgPhrase(pg), age: a, reason: rt.pgWaitReason(pg)})
	}
	for _, c := range rt.active {
		if c.len() == 0 {
			c.warn = warnState{}
			continue
		}
		head := c.peek()
		a := age(head.seq)
		if !c.warn.due(a, rt.waitWarn) {
			continue
		}
		out = append(out, waitWarning{what: classWaitPhrase(c), age: a, reason: rt.classWaitReason(c)})
	}
	return out
}

// askedSlices says what a slice request asks for, as gaveUp does.
func askedSlices(w *sliceWait) string {
	if w.sub.Count() > 0 {
		return "the sub-slice " + w.sub.String()
	}
	return fmt.Sprintf("%d × %s", w.n, w.shape)
}

// slicePoolPhrase says how the slices of pool p stand for a request with
// ahead requests before it in the queue, as the timeout error says it.
func slicePoolPhrase(p *shapePool, ahead int) string {
	var free, busy, broken int
	for _, s := range p.all {
		switch {
		case s.dead > 0:
			broken++
		case s.idle():
			free++
		default:
			busy++
		}
	}
	queue := ""
	if ahead > 0 {
		queue = fmt.Sprintf(", %d earlier %s still waiting", ahead, plural(ahead, "request", "requests"))
	}
	return fmt.Sprintf("of the cluster's %d slices of that shape %d free, %d busy, %d broken%s", len(p.all), free, busy, broken, queue)
}

// slicesHeldPhrase names who holds the pool's slices: this driver's
// reservations, and how many another driver holds.
func slicesHeldPhrase(p *shapePool) string {
	var names []string
	held := 0
	for _, s := range p.all {
		switch {
		case s.reservedBy != nil:
			name := fmt.Sprintf("%q", s.reservedBy.spec.Name)
			if s.reservedBy.spec.Name == "" {
				name = s.reservedBy.id.String()
			}
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		case s.held:
			held++
		}
	}
	var parts []string
	if len(names) > 0 {
		parts = append(parts, "reserved by "+strings.Join(names, ", "))
	}
	if held > 0 {
		parts = append(parts, fmt.Sprintf("%d held by another driver", held))
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}

func pgPhrase(pg *pgroup) string {
	if pg.spec.Name != "" {
		return fmt.Sprintf("placement group %q (%s) of %d %s", pg.spec.Name, pg.spec.Strategy, len(pg.bundles), plural(len(pg.bundles), "bundle", "bundles"))
	}
	return fmt.Sprintf("placement group %s (%s) of %d %s", pg.id, pg.spec.Strategy, len(pg.bundles), plural(len(pg.bundles), "bundle", "bundles"))
}

// pgWaitReason says why a pending group is not placed: the first bundle
// that fits no node's free resources, or else that the bundles do not
// fit together. b.mu must be held.
func (rt *Runtime) pgWaitReason(pg *pgroup) string {
	for _, bu := range pg.bundles {
		if bu.node != nil {
			continue
		}
		if r := rt.freePhrase(bu.sel, bu.demand); r.fitsNow == 0 {
			return fmt.Sprintf("bundle %d wants %s: %s", bu.index, rt.resourcesOf(bu.demand, bu.sel.slice), r.text)
		}
	}
	return fmt.Sprintf("each bundle fits some node's free resources, but %s needs them placed together and the free resources do not allow it now", pg.spec.Strategy)
}

// classWaitPhrase names the work queued in class c: its oldest request,
// and how many more wait with the same demand.
func classWaitPhrase(c *class) string {
	head := c.peek()
	var s string
	if a := head.actorOf(); a != nil {
		s = fmt.Sprintf("actor %q", a.spec.Class)
		if a.spec.Name != "" {
			s = fmt.Sprintf("actor %q (%s)", a.spec.Name, a.spec.Class)
		}
	} else {
		s = fmt.Sprintf("task %q", taskName(head))
	}
	if more := c.len() - 1; more > 0 {
		s += fmt.Sprintf(" and %d more with the same resources", more)
	}
	return s
}

// classWaitReason says why the head of class c waits. b.mu must be held.
func (rt *Runtime) classWaitReason(c *class) string {
	wants := fmt.Sprintf("wants %s%s", rt.resourcesOf(c.demand, c.sel.slice), selPhrase(c.selText))
	if c.pl.Group != 0 {
		pg := rt.pgs[c.pl.Group]
		switch {
		case pg == nil:
			return wants + fmt.Sprintf(" in placement group %s, which is gone", c.pl.Group)
		case pg.state == pgPending:
			return wants + fmt.Sprintf(" in %s, which is not placed yet", pgPhrase(pg))
		}
		var free []string
		for i, bu := range pg.bundles {
			if c.pl.Bundle == -1 || c.pl.Bundle == i {
				free = append(free, fmt.Sprintf("bundle %d has %s free", i, rt.resourcesOf(bu.free, bu.sel.slice)))
			}
		}
		return wants + fmt.Sprintf(" in %s: %s", pgPhrase(pg), strings.Join(free, ", "))
	}
	r := rt.freePhrase(c.sel, c.demand)
	if r.fitsNow > 0 && rt.needsHold(c.demand) {
		return wants + ": " + r.text + ", waiting for this driver's claim of a TPU host"
	}
	return wants + ": " + r.text
}

// freeSummary is how the nodes' free resources stand for a demand.
type freeSummary struct {
	text    string
	fitsNow int // live nodes that have it free now
}

// freePhrase says how the live nodes that match sel stand for demand: how
// many could ever hold it, how many have it free now, and the most any of
// them has free. b.mu must be held.
func (rt *Runtime) freePhrase(sel nodeMatcher, demand []int64) freeSummary {
	var could, fitsNow, restarting, running int
	var most []int64
	for _, n := range rt.nodes {
		if !sel.matches(n) || !fits(demand, n.capac) {
			continue
		}
		if !n.alive {
			if n.restarting {
				restarting++
			}
			continue
		}
		if n.draining {
			continue
		}
		could++
		running += n.running.len() + len(n.actors)
		if fits(demand, n.free) {
			fitsNow++
		}
		if most == nil {
			most = slices.Clone(n.free)
		} else {
			for i, q := range n.free {
				most[i] = max(most[i], q)
			}
		}
	}
	back := ""
	if restarting > 0 {
		back = fmt.Sprintf(" (%d more %s restarting)", restarting, plural(restarting, "is", "are"))
	}
	switch {
	case could == 0:
		return freeSummary{text: "no live node that can hold it" + back}
	case fitsNow > 0:
		return freeSummary{fitsNow: fitsNow, text: fmt.Sprintf("%d of the %d live nodes that can hold it %s it free now, but older requests that wait for the same nodes go first", fitsNow, could, plural(fitsNow, "has", "have"))}
	}
	return freeSummary{text: fmt.Sprintf("none of the %d live nodes that can hold it has it free now: they run %d tasks and actors, and the most any of them has free is %s%s",
		could, running, rt.resourcesOf(most, sel.slice), back)}
}
