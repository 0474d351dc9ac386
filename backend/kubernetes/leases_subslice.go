package kubernetes

import (
	"context"
	"sync"
)

// Sub-slice claims. A sub-slice reservation (some hosts of a slice) takes
// the slice's Lease in shared mode: the Lease's claim annotation is
// subsliceClaim instead of a reservation ID, and the driver keeps, in
// memory, the record of which of its sub-slice reservations hold it. The
// first sub-slice claim of a slice creates (or takes over) the Lease, the
// others of the same driver join it without an API call, and the last
// release deletes it. Another driver finds the Lease held and gets a
// *core.HeldError, for a sub-slice as for the whole slice, so two drivers
// never hold the same host; the cost is that one driver's sub-slice keeps
// other drivers off the whole slice (its other sub-slices too), which is
// what a Lease per host would avoid at the price of one Lease per host on
// every claim. Within one driver the runtime's slice index keeps its
// sub-slices and whole slices apart; a whole-slice claim of a slice that
// the same driver holds in shared mode is refused like any other.

// subsliceClaim is the claim annotation of a slice Lease held for
// sub-slice reservations.
const subsliceClaim = "subslices"

// ClaimSubslice claims the slice's Lease for the sub-slice reservation
// claim, shared with this driver's other sub-slice reservations of the
// slice. Errors are those of Claim.
func (l *Leases) ClaimSubslice(ctx context.Context, claim, slice string) error {
	defer l.lockSubslices(slice)()
	l.mu.Lock()
	if set := l.subs[slice]; set != nil && l.held[slice] != nil {
		set[claim] = true
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	if err := l.Claim(ctx, subsliceClaim, []string{slice}); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.subs[slice] == nil {
		l.subs[slice] = map[string]bool{}
	}
	l.subs[slice][claim] = true
	return nil
}

// ReleaseSubslice ends the sub-slice reservation claim of slice; the
// slice's Lease is deleted with the last of them.
func (l *Leases) ReleaseSubslice(ctx context.Context, claim, slice string) error {
	defer l.lockSubslices(slice)()
	l.mu.Lock()
	set := l.subs[slice]
	delete(set, claim)
	last := len(set) == 0
	if last {
		delete(l.subs, slice)
	}
	l.mu.Unlock()
	if !last {
		return nil
	}
	return l.Release(ctx, []string{slice})
}

// lockSubslices serializes the sub-slice claims and releases of slice and
// returns the unlock: a claim that joins (or re-creates) the slice's
// Lease must not interleave with the release that deletes it, or the
// release would delete the Lease the claim just took. The runtime claims
// a sub-slice while another of the same slice is being released.
func (l *Leases) lockSubslices(slice string) (unlock func()) {
	l.mu.Lock()
	m := l.subOps[slice]
	if m == nil {
		m = &sync.Mutex{}
		l.subOps[slice] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// SubsliceClaims returns this driver's sub-slice reservations of slice.
func (l *Leases) SubsliceClaims(slice string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sortedKeys(l.subs[slice])
}
