package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// This file keeps capacity asked for by a driver that is gone from
// holding anything. A driver's capacity pods (and, with ProvisionRequest,
// its ProvisioningRequest and PodTemplate) exist before it holds any
// slice Lease, so a slice Lease cannot tell whether their requester still
// lives. A handle that provisions therefore holds a handle Lease,
// goray-handle-<cluster>, created before its first capacity pod, renewed
// with its slice Leases and deleted when it closes. Whoever finds
// capacity of another handle in its way (a claim of a slice it sits on or
// waits for, or a Provision that might race it) looks at that handle's
// Lease: absent, or expired and seen unchanged for handleConfirm, the
// requester is gone, and what it left is removed (collectHandle): its
// capacity pods in any phase, its ProvisioningRequests and PodTemplates,
// and, when it holds no live Lease, its token Secret (the owner of its
// other objects) and Service.

// HandleLeaseName returns the name of the handle Lease of a cluster handle
// that provisions capacity.
func HandleLeaseName(cluster ClusterID) string { return dnsName("goray-handle", string(cluster)) }

// labelHandle marks a handle Lease; its value is the handle's ClusterID.
const labelHandle = labelPrefix + "handle"

// ensureHandle creates this handle's Lease if it does not hold it yet. It
// is called before the handle's first capacity pod, so that a capacity pod
// whose handle has no Lease belongs to a handle that is gone.
func (l *Leases) ensureHandle(ctx context.Context) error {
	l.mu.Lock()
	have := l.handle != nil
	l.mu.Unlock()
	if have {
		return nil
	}
	now := metav1.NewMicroTime(l.now())
	secs := int32(l.duration / time.Second)
	lease := &coordv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: HandleLeaseName(ClusterID(l.cluster)), Namespace: l.ns,
			Labels:      map[string]string{labelManagedBy: managedBy, labelHandle: labelValue(l.cluster), LabelCluster: labelValue(l.cluster)},
			Annotations: map[string]string{annotationCluster: l.cluster},
		},
		Spec: coordv1.LeaseSpec{HolderIdentity: &l.identity, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
	}
	var created *coordv1.Lease
	err := retry.OnError(l.backoff, func(err error) bool { return !apierrors.IsAlreadyExists(err) && retriable(err) }, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		created, err = l.client.CoordinationV1().Leases(l.ns).Create(ctx, lease, metav1.CreateOptions{})
		return err
	})
	if apierrors.IsAlreadyExists(err) {
		// A create that timed out but went through: take it as ours.
		created, err = l.client.CoordinationV1().Leases(l.ns).Get(ctx, lease.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("create the handle Lease %s/%s: %w", l.ns, lease.Name, err)
	}
	l.mu.Lock()
	l.handle = created
	l.mu.Unlock()
	return nil
}

// renewHandle renews the handle Lease, if this handle holds one.
func (l *Leases) renewHandle(ctx context.Context) error {
	l.mu.Lock()
	cur := l.handle
	l.mu.Unlock()
	if cur == nil {
		return nil
	}
	leases := l.client.CoordinationV1().Leases(l.ns)
	next := cur.DeepCopy()
	err := retry.OnError(l.renewBackoff(), func(err error) bool { return ctx.Err() == nil && retriable(err) }, func() error {
		now := metav1.NewMicroTime(l.now())
		next.Spec.RenewTime = &now
		updated, err := leases.Update(ctx, next, metav1.UpdateOptions{})
		switch {
		case err == nil:
			l.mu.Lock()
			if l.handle != nil {
				l.handle = updated
			}
			l.mu.Unlock()
			return nil
		case apierrors.IsNotFound(err):
			// Collected by another driver that took this handle for gone
			// (it could not renew for longer than a Lease): make it again.
			next = cur.DeepCopy()
			next.ResourceVersion, next.UID = "", ""
			created, cerr := leases.Create(ctx, next, metav1.CreateOptions{})
			if cerr != nil {
				return cerr
			}
			l.mu.Lock()
			l.handle = created
			l.mu.Unlock()
			return nil
		case apierrors.IsConflict(err):
			fresh, gerr := leases.Get(ctx, cur.Name, metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			next = fresh
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("renew the handle Lease %s/%s: %w", l.ns, cur.Name, err)
	}
	return nil
}

// releaseHandle deletes the handle Lease (Close).
func (l *Leases) releaseHandle(ctx context.Context) {
	l.mu.Lock()
	cur := l.handle
	l.handle = nil
	l.mu.Unlock()
	if cur == nil {
		return
	}
	err := retry.OnError(l.backoff, func(err error) bool { return !apierrors.IsNotFound(err) && retriable(err) }, func() error {
		return l.client.CoordinationV1().Leases(l.ns).Delete(ctx, cur.Name, metav1.DeleteOptions{})
	})
	if err != nil && !apierrors.IsNotFound(err) {
		l.log.Warn("delete the handle Lease", "lease", cur.Name, "err", err)
	}
}

// handleConfirm is how long another handle's Lease must be seen expired,
// unchanged, before that handle is taken for gone: a driver that rode out
// an API server outage renews within moments of the API server answering
// again (Leases.retryEvery), so it is not collected for a Lease that only
// looked expired because nobody could renew anything.
func (l *Leases) handleConfirm() time.Duration { return min(l.renew, 2*time.Second) }

// handleGone reports whether the handle of cluster id is gone: its handle
// Lease is absent, or expired and seen so, unchanged, for handleConfirm.
// Errors count as alive (nothing is removed on a guess).
func (l *Leases) handleGone(ctx context.Context, id string) bool {
	lease, err := l.client.CoordinationV1().Leases(l.ns).Get(ctx, HandleLeaseName(ClusterID(id)), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true
	}
	if err != nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.expired(lease) {
		delete(l.seenExpired, lease.Name)
		return false
	}
	seen, ok := l.seenExpired[lease.Name]
	if !ok || seen.rv != lease.ResourceVersion {
		l.seenExpired[lease.Name] = expiredSeen{rv: lease.ResourceVersion, at: l.now()}
		return l.handleConfirm() <= 0
	}
	return l.now().Sub(seen.at) >= l.handleConfirm()
}

// expiredSeen is when a Lease of another handle was first seen expired,
// at which resourceVersion.
type expiredSeen struct {
	rv string
	at time.Time
}

// goneHandles returns the handles other than this one that own capacity
// pods among pods and are gone (handleGone), and collects what each left.
func (s *Source) goneHandles(ctx context.Context, pods []corev1.Pod) map[string]bool {
	gone := map[string]bool{}
	if s.leases == nil {
		return gone
	}
	alive := map[string]bool{}
	for _, p := range pods {
		id := p.Labels[LabelCluster]
		if id == "" || id == s.cluster || gone[id] || alive[id] {
			continue
		}
		if s.leases.handleGone(ctx, id) {
			gone[id] = true
			s.collectHandle(ctx, id)
		} else {
			alive[id] = true
		}
	}
	return gone
}

// collectHandle removes what the gone handle of cluster id left: its
// capacity pods (in any phase), its ProvisioningRequests and their
// PodTemplates, and, when it holds no live Lease, its Secret (which owns
// the handle's other objects, so the garbage collector removes them) and
// Service; then its handle Lease. Failures are logged: whoever finds the
// capacity next tries again.
func (s *Source) collectHandle(ctx context.Context, id string) {
	log := s.log.With("gone cluster", id)
	sel := labelCapacity + "," + LabelCluster + "=" + labelValue(id)
	if err := deletePods(ctx, s.client, s.ns, sel); err != nil {
		log.Warn("delete the capacity pods of a gone handle", "err", err)
	}
	var errs []error
	own := metav1.ListOptions{LabelSelector: LabelCluster + "=" + labelValue(id)}
	if rc := s.restClient(); rc != nil {
		raw, err := rc.Get().AbsPath(s.provReqPath("")).Param("labelSelector", own.LabelSelector).Do(ctx).Raw()
		var list struct {
			Items []provReq `json:"items"`
		}
		switch {
		case apierrors.IsNotFound(err):
			// The cluster serves no ProvisioningRequests.
		case err != nil:
			errs = append(errs, fmt.Errorf("list ProvisioningRequests: %w", err))
		case json.Unmarshal(raw, &list) != nil:
			errs = append(errs, errors.New("list ProvisioningRequests: cannot decode the list"))
		}
		for _, pr := range list.Items {
			err := rc.Delete().AbsPath(s.provReqPath(pr.Metadata.Name)).Do(ctx).Error()
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete ProvisioningRequest %s: %w", pr.Metadata.Name, err))
			}
		}
	}
	tmpls, err := s.client.CoreV1().PodTemplates(s.ns).List(ctx, own)
	if err != nil {
		errs = append(errs, fmt.Errorf("list PodTemplates: %w", err))
	} else {
		for _, t := range tmpls.Items {
			err := s.client.CoreV1().PodTemplates(s.ns).Delete(ctx, t.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete PodTemplate %s: %w", t.Name, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		log.Warn("delete the ProvisioningRequests of a gone handle", "err", err)
	}
	if s.leases.collectIfNoLiveLease(ctx, id, "", log) {
		err := s.client.CoordinationV1().Leases(s.ns).Delete(ctx, HandleLeaseName(ClusterID(id)), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			log.Warn("delete the handle Lease of a gone handle", "err", err)
		}
	}
	log.Info("kubernetes: removed what a gone driver left of the capacity it asked for")
}

// sweepGone removes what gone handles left of their capacity, from the
// capacity pods in the API server's watch cache. Errors are ignored: the
// next claim that finds such capacity in its way tries again.
func (s *Source) sweepGone(ctx context.Context) {
	pods, err := s.client.CoreV1().Pods(s.ns).List(ctx, metav1.ListOptions{LabelSelector: labelCapacity, ResourceVersion: "0"})
	if err != nil {
		return
	}
	s.goneHandles(ctx, pods.Items)
}

// finished reports whether pod p has ended (its containers hold nothing).
func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}
