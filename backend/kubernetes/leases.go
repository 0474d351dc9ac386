package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/backend/cluster"
)

// Leases claims TPU slices for one driver with coordination.k8s.io
// Leases, so that drivers sharing a cluster never hold one slice twice:
//
//   - one Lease per slice, named goray-slice-<slice>, created only if
//     absent, with this driver's identity as holder;
//   - a Lease held by another driver is taken over only once it has
//     expired (its renew time plus its duration has passed), by an
//     update that carries the resourceVersion read, so that of two
//     drivers racing for an expired Lease exactly one wins;
//   - a renewal loop refreshes every held Lease each RenewEvery; a Lease
//     found taken over or deleted is reported lost (OnLost), and so is a
//     Lease this driver could not renew for long enough that it can no
//     longer be sure it holds it (Fence), before that Lease can expire;
//   - a claim of several slices is all or nothing: when one slice is held
//     elsewhere or an API call fails, the Leases already taken are
//     deleted before the claim returns;
//   - Release deletes the Leases (only if still ours), retried with
//     backoff, even after the caller's context ended.
//
// API errors that may pass (conflicts, timeouts, throttling, an apiserver
// restarting) are retried with exponential backoff. A driver that crashes
// leaves Leases that any other driver takes over after they expire.
type Leases struct {
	client   kubernetes.Interface
	ns       string
	identity string
	duration time.Duration
	renew    time.Duration
	log      *slog.Logger
	now      func() time.Time
	backoff  wait.Backoff
	onLost   func(slice string, cause error)
	// cluster is the handle's ClusterID (LabelCluster of its objects),
	// written into its Leases so that whoever takes one over after it
	// expired can collect what this handle left (collectExpired).
	cluster string

	mu   sync.Mutex
	held map[string]*coordv1.Lease // by slice: the last version written
	// renewErr is the last renewal error of a held slice, for Fence.
	renewErr map[string]error
	subs     map[string]map[string]bool // by slice: its sub-slice claims (leases_subslice.go)
	// subOps serializes the sub-slice claims and releases of a slice
	// (leases_subslice.go); one per slice ever sub-sliced.
	subOps map[string]*sync.Mutex
	// handle is this handle's own Lease once it provisions capacity
	// (handles.go), renewed with the slice Leases.
	handle *coordv1.Lease
	// seenExpired holds other handles' Leases seen expired (handles.go).
	seenExpired map[string]expiredSeen
	// failing is set while the last round of renewals had an error
	// (renewLoop retries every retryEvery then).
	failing bool
}

// NewLeases returns the slice claimer of one driver for cfg (its
// Namespace, Identity and Lease times) on client.
func NewLeases(client kubernetes.Interface, cfg Config) (*Leases, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	return &Leases{
		client: client, ns: cfg.Namespace, identity: cfg.Identity,
		duration: cfg.Lease.Duration, renew: cfg.Lease.RenewEvery,
		log: cfg.Logger, now: time.Now,
		backoff:     wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 2 * time.Second},
		held:        map[string]*coordv1.Lease{},
		renewErr:    map[string]error{},
		subs:        map[string]map[string]bool{},
		subOps:      map[string]*sync.Mutex{},
		seenExpired: map[string]expiredSeen{},
	}, nil
}

// Identity is the holder identity this driver writes into its Leases.
func (l *Leases) Identity() string { return l.identity }

// LeaseName returns the name of the Lease of a slice.
func LeaseName(slice string) string { return dnsName("goray-slice", slice) }

// Held returns the slices this driver holds.
func (l *Leases) Held() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return sortedKeys(l.held)
}

// retriable reports whether an API error may pass on retry.
func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) || apierrors.IsInternalError(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsUnexpectedServerError(err) || isNetError(err)
}

func isNetError(err error) bool {
	var se apierrors.APIStatus
	return err != nil && !errors.As(err, &se) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// apiCode classifies an API error.
func apiCode(err error) backend.Code {
	switch {
	case err == nil:
		return backend.OK
	case apierrors.IsNotFound(err):
		return backend.NotFound
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return backend.FailedPrecondition
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return backend.InvalidArgument
	case apierrors.IsAlreadyExists(err):
		return backend.AlreadyExists
	}
	return backend.Unavailable
}

// Claim takes the Lease of every slice for claim (a reservation ID, kept
// in the Leases' annotations), all or nothing. When another driver holds
// one, it returns a *cluster.HeldError (code ResourceExhausted) naming the
// slices held elsewhere and their holder; any other failure is returned
// with its code. On error no Lease of slices is held.
func (l *Leases) Claim(ctx context.Context, claim string, slices []string) error {
	op := "claim TPU slices"
	var got []string
	var held *cluster.HeldError
	for i, s := range slices {
		holder, err := l.acquire(ctx, claim, s)
		if err == nil && holder != "" {
			held = &cluster.HeldError{Slices: []string{s}, Holder: holder}
			// Name every other slice held elsewhere too, so that the
			// runtime skips them all at once.
			for _, rest := range slices[i+1:] {
				if h := l.holderOf(ctx, rest); h != "" && h != l.identity {
					held.Slices = append(held.Slices, rest)
				}
			}
		}
		if err != nil || held != nil {
			rerr := l.Release(ctx, got)
			if held != nil {
				if rerr != nil {
					return errors.Join(held, rerr)
				}
				return held
			}
			return backend.Wrap(apiCode(err), op, errors.Join(fmt.Errorf("slice %q: %w", s, err), rerr))
		}
		got = append(got, s)
	}
	return nil
}

// holderOf returns the live holder of a slice's Lease, or "".
func (l *Leases) holderOf(ctx context.Context, slice string) string {
	lease, err := l.client.CoordinationV1().Leases(l.ns).Get(ctx, LeaseName(slice), metav1.GetOptions{})
	if err != nil || l.expired(lease) {
		return ""
	}
	return deref(lease.Spec.HolderIdentity)
}

// acquire takes one slice's Lease. It returns the other holder's identity
// when the Lease is held elsewhere and has not expired.
func (l *Leases) acquire(ctx context.Context, claim, slice string) (holder string, err error) {
	var taken *coordv1.Lease // the expired Lease of another holder, taken over
	name := LeaseName(slice)
	leases := l.client.CoordinationV1().Leases(l.ns)
	err = retry.OnError(l.backoff, retriable, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		holder, taken = "", nil
		// Create first: a free slice (the common case) costs one call.
		created, err := leases.Create(ctx, l.newLease(claim, slice, nil), metav1.CreateOptions{})
		if err == nil {
			l.store(slice, created)
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		cur, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err // NotFound: deleted meanwhile; try again
		}
		if h := deref(cur.Spec.HolderIdentity); h != "" && h != l.identity && !l.expired(cur) {
			holder = h
			return nil
		}
		if deref(cur.Spec.HolderIdentity) == l.identity && cur.Annotations[annotationClaim] != claim && l.isHeld(slice) {
			holder = l.identity + " (reservation " + cur.Annotations[annotationClaim] + ")"
			return nil
		}
		// Free, expired, or ours from a previous life: take it over with
		// the resourceVersion read (a conflict means another driver won
		// the race; look again).
		next := l.newLease(claim, slice, cur)
		updated, err := leases.Update(ctx, next, metav1.UpdateOptions{})
		if err != nil {
			return err
		}
		l.store(slice, updated)
		if h := deref(cur.Spec.HolderIdentity); h != "" && h != l.identity {
			taken = cur
		}
		return nil
	})
	if err == nil && taken != nil {
		l.collectExpired(ctx, slice, taken)
	}
	return holder, err
}

// collectExpired removes what the handle that held an expired Lease left,
// now that this driver took the Lease over: that handle's worker pods on
// the slice at once (they hold its google.com/tpu chips until their idle
// timeout otherwise), and, when it holds no live Lease any more (it died,
// or has been cut off for longer than a Lease), its token Secret, which
// owns every other object of the handle (its Service, later Secret
// generations, CPU pods and finished pods), so the garbage collector
// removes them, and its Service. Failures are logged: the claim stands,
// and the new pods wait for the chips as pods do.
func (l *Leases) collectExpired(ctx context.Context, slice string, old *coordv1.Lease) {
	dead := old.Annotations[annotationCluster]
	holder := deref(old.Spec.HolderIdentity)
	if dead == "" || dead == l.cluster {
		return // a Lease from before the annotation, or this handle's own
	}
	log := l.log.With("slice", slice, "expired holder", holder, "expired cluster", dead)
	sel := LabelCluster + "=" + labelValue(dead) + "," + LabelSlice + "=" + labelValue(slice)
	if err := deletePods(ctx, l.client, l.ns, sel); err != nil {
		log.Warn("delete the expired holder's worker pods on the slice", "err", err)
	} else {
		log.Info("deleted the expired holder's worker pods on the slice")
	}
	if l.collectIfNoLiveLease(ctx, dead, holder, log) {
		log.Info("collected the objects of a handle that holds no live Lease", "secret", dnsName("goray", dead))
	}
}

// collectIfNoLiveLease deletes the token Secret (the owner of every other
// object of the handle, which the garbage collector then removes) and the
// Service of the handle of cluster dead, unless it still holds a live
// Lease (a slice's, or its handle Lease), by holder if holder is set. It
// reports whether the handle held none.
func (l *Leases) collectIfNoLiveLease(ctx context.Context, dead, holder string, log *slog.Logger) bool {
	list, err := l.client.CoordinationV1().Leases(l.ns).List(ctx, metav1.ListOptions{LabelSelector: labelManagedBy + "=" + managedBy})
	if err != nil {
		log.Warn("list Leases to see whether a gone holder holds others", "err", err)
		return false
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.Annotations[annotationCluster] == dead && (holder == "" || deref(o.Spec.HolderIdentity) == holder) && !l.expired(o) {
			return false // alive elsewhere: only this slice was given up
		}
	}
	name := dnsName("goray", dead)
	for kind, del := range map[string]func(context.Context, string, metav1.DeleteOptions) error{
		"Secret":  l.client.CoreV1().Secrets(l.ns).Delete,
		"Service": l.client.CoreV1().Services(l.ns).Delete,
	} {
		if err := del(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			log.Warn("delete the gone holder's "+kind, "name", name, "err", err)
		}
	}
	return true
}

// annotationClaim holds the reservation a Lease was claimed for, and
// annotationCluster the ClusterID of the handle that claimed it.
const (
	annotationClaim   = labelPrefix + "reservation"
	annotationCluster = labelPrefix + "cluster"
)

// newLease returns the Lease that claims slice, replacing cur if set.
func (l *Leases) newLease(claim, slice string, cur *coordv1.Lease) *coordv1.Lease {
	now := metav1.NewMicroTime(l.now())
	secs := int32(l.duration / time.Second)
	lease := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: LeaseName(slice), Namespace: l.ns,
			Labels:      map[string]string{labelManagedBy: managedBy, LabelSlice: labelValue(slice)},
			Annotations: map[string]string{AnnotationSlice: slice, annotationClaim: claim, annotationCluster: l.cluster},
		},
		Spec: coordv1.LeaseSpec{
			HolderIdentity: &l.identity, LeaseDurationSeconds: &secs,
			AcquireTime: &now, RenewTime: &now, LeaseTransitions: new(int32),
		},
	}
	if cur != nil {
		lease.ResourceVersion, lease.UID = cur.ResourceVersion, cur.UID
		t := deref(cur.Spec.LeaseTransitions)
		if deref(cur.Spec.HolderIdentity) != l.identity {
			t++
		}
		lease.Spec.LeaseTransitions = &t
	}
	return lease
}

// expired reports whether a Lease's holder has stopped renewing it.
func (l *Leases) expired(lease *coordv1.Lease) bool {
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return true
	}
	end := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	return !l.now().Before(end)
}

func (l *Leases) store(slice string, lease *coordv1.Lease) {
	l.mu.Lock()
	l.held[slice] = lease
	delete(l.renewErr, slice)
	l.mu.Unlock()
}

func (l *Leases) isHeld(slice string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[slice] != nil
}

// Release deletes the Leases of slices that are still this driver's,
// retrying API errors with backoff. It runs to its end even when ctx is
// done (bounded by twice the Lease duration), so that a cancelled
// reservation leaves no Lease behind.
func (l *Leases) Release(ctx context.Context, slices []string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*l.duration)
	defer cancel()
	var errs []error
	for _, s := range slices {
		l.mu.Lock()
		delete(l.held, s)
		l.mu.Unlock()
		if err := l.deleteIfOurs(ctx, s); err != nil {
			errs = append(errs, fmt.Errorf("slice %q: %w", s, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return backend.Wrap(backend.Unavailable, "release TPU slices", err)
	}
	return nil
}

func (l *Leases) deleteIfOurs(ctx context.Context, slice string) error {
	leases := l.client.CoordinationV1().Leases(l.ns)
	return retry.OnError(l.backoff, retriable, func() error {
		cur, err := leases.Get(ctx, LeaseName(slice), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if deref(cur.Spec.HolderIdentity) != l.identity {
			return nil // taken over after it expired: not ours to delete
		}
		err = leases.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{
			UID: &cur.UID, ResourceVersion: &cur.ResourceVersion,
		}})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// renewLoop renews every held Lease (and the handle Lease) each
// RenewEvery until ctx ends; while a renewal fails (the API server does not
// answer: an outage, a partition) it tries again every retryEvery, so that
// the Leases are renewed within moments of the API server answering again.
// A Lease that is not renewed is not given up for that alone: only its
// being seen held by another driver (or deleted), or its slice's worker
// pods being gone while it went unrenewed (LostOnPodLoss), ends this
// driver's use of the slice (see docs/kubernetes.md, Outages and
// partitions). When ctx ends the handle Lease is deleted.
func (l *Leases) renewLoop(ctx context.Context) {
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*l.duration)
		defer cancel()
		l.releaseHandle(dctx)
	}()
	t := time.NewTimer(l.renew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, l.renew)
		l.RenewAll(rctx)
		cancel()
		t.Reset(l.nextRenewal())
	}
}

// nextRenewal is how long renewLoop waits for the next round: RenewEvery,
// or retryEvery while renewals fail.
func (l *Leases) nextRenewal() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing {
		return l.retryEvery()
	}
	return l.renew
}

// retryEvery is how often a renewal that fails is tried again: a tenth of
// RenewEvery, at most 200 ms.
func (l *Leases) retryEvery() time.Duration {
	return max(min(l.renew/10, 200*time.Millisecond), time.Millisecond)
}

// renewBackoff retries a renewal every retryEvery within its round.
func (l *Leases) renewBackoff() wait.Backoff {
	return wait.Backoff{Duration: l.retryEvery(), Factor: 1, Jitter: 0.1, Steps: int(l.renew/l.retryEvery()) + 1}
}

// lostAfter is how long a Lease may go unrenewed before the loss of its
// slice's worker pods is taken for its loss (LostOnPodLoss): halfway
// between a renewal period and the Lease's expiry (10 s of the default
// 15 s). Before that nobody can have taken the Lease over, so a lost pod
// is only a lost pod; after it another driver may have, and a takeover
// deletes this driver's pods on the slice.
func (l *Leases) lostAfter() time.Duration { return l.renew + (l.duration-l.renew)/2 }

// LostOnPodLoss is told that a worker pod of this driver on slice was
// lost. If slice's Lease has not been renewed for lostAfter, it is taken
// for lost (another driver may have taken it over after it expired, and
// deleted this driver's pods): it is dropped, its slice reported lost
// (OnLost), and the error saying so returned. Otherwise it returns nil.
func (l *Leases) LostOnPodLoss(slice string, podCause error) error {
	now := l.now()
	l.mu.Lock()
	lease := l.held[slice]
	if lease == nil || lease.Spec.RenewTime == nil {
		l.mu.Unlock()
		return nil
	}
	age := now.Sub(lease.Spec.RenewTime.Time)
	if age < l.lostAfter() {
		l.mu.Unlock()
		return nil
	}
	why := "no renewal succeeded"
	if err := l.renewErr[slice]; err != nil {
		why = "last error: " + err.Error()
	}
	delete(l.held, slice)
	delete(l.renewErr, slice)
	l.mu.Unlock()
	cause := fmt.Errorf("lost the Lease %s/%s of TPU slice %q: its worker pods are gone (%v) while the Lease could not be renewed for %v (%s), past the point where another driver may take it over (%v after its last renewal) and delete this driver's pods; this driver stops using the slice",
		l.ns, LeaseName(slice), slice, podCause, age.Round(time.Millisecond), why, l.duration)
	l.log.Warn("slice lease lost: worker pods gone while it went unrenewed", "slice", slice, "cause", cause)
	if l.onLost != nil {
		l.onLost(slice, cause)
	}
	return cause
}

// RenewAll renews every held Lease once, retrying failures every
// retryEvery until ctx ends. A Lease found held by another driver, or
// deleted, is dropped and reported through OnLost; other errors are
// logged and retried at the next round.
func (l *Leases) RenewAll(ctx context.Context) {
	l.mu.Lock()
	held := make(map[string]*coordv1.Lease, len(l.held))
	for s, lease := range l.held {
		held[s] = lease
	}
	l.mu.Unlock()
	failing := false
	l.mu.Lock()
	wasFailing := l.failing
	l.mu.Unlock()
	if err := l.renewHandle(ctx); err != nil {
		failing = true
		if !wasFailing {
			l.log.Warn("renew the handle lease", "err", err)
		}
	}
	for _, s := range sortedKeys(held) {
		lost, err := l.renewOne(ctx, s, held[s])
		if lost != nil {
			l.mu.Lock()
			_, still := l.held[s]
			delete(l.held, s)
			l.mu.Unlock()
			if still && l.onLost != nil {
				l.log.Warn("slice lease lost", "slice", s, "cause", lost)
				l.onLost(s, lost)
			}
		}
		l.mu.Lock()
		first := l.renewErr[s] == nil
		if err != nil {
			l.renewErr[s] = err
			failing = true
		} else {
			delete(l.renewErr, s)
		}
		l.mu.Unlock()
		switch {
		case err != nil && first:
			l.log.Warn("renew slice lease: retrying until the API server answers; the slice stays in use meanwhile", "slice", s, "err", err)
		case err != nil:
			l.log.Debug("renew slice lease", "slice", s, "err", err)
		}
	}
	l.mu.Lock()
	l.failing = failing
	l.mu.Unlock()
}

func (l *Leases) renewOne(ctx context.Context, slice string, last *coordv1.Lease) (lost, err error) {
	leases := l.client.CoordinationV1().Leases(l.ns)
	cur := last.DeepCopy()
	err = retry.OnError(l.renewBackoff(), func(err error) bool { return ctx.Err() == nil && retriable(err) }, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		now := metav1.NewMicroTime(l.now())
		cur.Spec.RenewTime = &now
		updated, err := leases.Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			l.mu.Lock()
			if l.held[slice] != nil {
				l.held[slice] = updated
			}
			l.mu.Unlock()
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return err
		}
		fresh, gerr := leases.Get(ctx, LeaseName(slice), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			lost = fmt.Errorf("the Lease %s/%s of TPU slice %q was deleted", l.ns, LeaseName(slice), slice)
			return nil
		case gerr != nil:
			return gerr
		case deref(fresh.Spec.HolderIdentity) != l.identity:
			lost = fmt.Errorf("the Lease %s/%s of TPU slice %q was taken over by %s after it expired",
				l.ns, LeaseName(slice), slice, deref(fresh.Spec.HolderIdentity))
			return nil
		}
		cur = fresh
		return err // the conflict: retry with the fresh version
	})
	return lost, err
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
