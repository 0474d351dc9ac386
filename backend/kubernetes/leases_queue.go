package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/goray-dev/goray/backend/cluster"
)

// This file orders whole-slice requests of one shape across drivers, so
// that none starves. Within a driver the runtime serves requests first
// come, first served per shape; across drivers, without this, a request
// for two slices could wait for ever while another driver reserved and
// released single slices of the shape, as each of its claims found one
// slice held. The rule:
//
//   - a driver whose claim of slices of a shape is refused because
//     another driver holds one becomes that shape's head, unless another
//     driver already is: it writes the shape's queue Lease
//     (goray-queue-<shape>) and renews it with each of its retries;
//   - while another driver is the live head of a shape, a driver claims
//     no slice of that shape (its claim fails as held, naming the head,
//     and the runtime retries): the slices the head waits for are not
//     taken again when they are released;
//   - the head's claim that succeeds deletes the queue Lease; a head that
//     gave up (its request was cancelled or timed out, or it died) stops
//     renewing, and the Lease expires after queueTTL.
//
// So requests of a shape from different drivers are served in the order
// they were first refused, one head at a time; within a driver, first
// come, first served. Sub-slice claims are not queued.

// queueTTL is how long a head's queue Lease lasts without a renewal: a
// waiting head retries its claim every ClaimRetry (1 s).
const queueTTL = 3 * time.Second

// QueueLeaseName is the name of the queue Lease of a slice shape (such
// as "v6e/4x4/4").
func QueueLeaseName(shape string) string { return dnsName("goray-queue", shape) }

// ClaimQueued is Claim for slices of one shape, in the order of the
// shape's queue across drivers (see this file's comment).
func (l *Leases) ClaimQueued(ctx context.Context, claim, shape string, slices []string) error {
	head, mine := l.queueHead(ctx, shape)
	if head != "" {
		return &cluster.HeldError{Slices: slices, Holder: head + ", which waits first for " + shape + " slices"}
	}
	err := l.Claim(ctx, claim, slices)
	var held *cluster.HeldError
	switch {
	case err == nil && mine:
		// This driver was the queue's head; with no queue, or another's
		// expired one, it has nothing to leave (and saves the read).
		l.dequeue(ctx, shape)
	case errors.As(err, &held):
		if qerr := l.enqueue(ctx, claim, shape); qerr != nil {
			l.log.Warn("queue for TPU slices", "shape", shape, "err", qerr)
		}
	}
	return err
}

// queueHead returns the identity of another driver that is the live head
// of shape's queue, or "", and whether this driver holds the queue's
// Lease.
func (l *Leases) queueHead(ctx context.Context, shape string) (head string, mine bool) {
	q, err := l.client.CoordinationV1().Leases(l.ns).Get(ctx, QueueLeaseName(shape), metav1.GetOptions{})
	if err != nil {
		return "", false // none (or unreadable: claims go on as without a queue)
	}
	h := deref(q.Spec.HolderIdentity)
	if h != l.identity && !l.expired(q) {
		return h, false
	}
	return "", h == l.identity
}

// enqueue makes this driver the head of shape's queue, or renews its
// turn: it creates the queue Lease, renews its own, or takes over an
// expired one. Another driver's live Lease leaves it as it is.
func (l *Leases) enqueue(ctx context.Context, claim, shape string) error {
	leases := l.client.CoordinationV1().Leases(l.ns)
	name := QueueLeaseName(shape)
	return retry.OnError(l.backoff, retriable, func() error {
		now := metav1.NewMicroTime(l.now())
		secs := int32(queueTTL / time.Second)
		cur, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			q := &coordv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: l.ns,
					Labels:      map[string]string{labelManagedBy: managedBy},
					Annotations: map[string]string{annotationShape: shape, annotationClaim: claim, annotationCluster: l.cluster}},
				Spec: coordv1.LeaseSpec{HolderIdentity: &l.identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
			}
			_, err = leases.Create(ctx, q, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(coordv1.Resource("leases"), name, err) // look again
			}
			return err
		}
		if err != nil {
			return err
		}
		if h := deref(cur.Spec.HolderIdentity); h != l.identity && !l.expired(cur) {
			return nil // another driver is the head
		}
		next := cur.DeepCopy()
		if deref(next.Spec.HolderIdentity) != l.identity {
			next.Spec.HolderIdentity, next.Spec.AcquireTime = &l.identity, &now
			next.Annotations[annotationClaim], next.Annotations[annotationCluster] = claim, l.cluster
		}
		next.Spec.RenewTime, next.Spec.LeaseDurationSeconds = &now, &secs
		_, err = leases.Update(ctx, next, metav1.UpdateOptions{})
		return err
	})
}

// dequeue deletes shape's queue Lease if this driver is its head.
func (l *Leases) dequeue(ctx context.Context, shape string) {
	leases := l.client.CoordinationV1().Leases(l.ns)
	cur, err := leases.Get(ctx, QueueLeaseName(shape), metav1.GetOptions{})
	if err != nil || deref(cur.Spec.HolderIdentity) != l.identity {
		return
	}
	err = leases.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		l.log.Warn("leave the queue for TPU slices", "shape", shape, "err", fmt.Errorf("delete Lease %s: %w", cur.Name, err))
	}
}

// annotationShape holds the slice shape of a queue Lease.
const annotationShape = labelPrefix + "shape"
