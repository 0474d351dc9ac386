package kubernetes

import (
	"context"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/tpu"
)

// This file reads a cluster's TPU slices and who holds them, for tools
// (goray slices): it lists nodes and Leases and changes nothing.

// SliceInfo is one TPU slice of a Kubernetes cluster as [InspectSlices]
// reads it: the slice (a GKE TPU node pool) as a [backend.SliceState], so
// that ray.FormatSlices and ray.SummarizeSlices draw it as for any
// cluster, and the slice Lease that holds it.
//
// In the SliceState, a host is alive when its node is Ready and
// schedulable, and a held slice has ReservedBy set to a number that tells
// apart the distinct holders of this listing (1, 2, ... in slice order;
// it is not a placement group ID of any process) and ReservedName to the
// holder and its reservation. A slice missing hosts lists them last, dead,
// named [MissingHost]. ChipsInUse is not read (always 0).
type SliceInfo struct {
	backend.SliceState
	// Holder is the identity of the driver whose unexpired Lease holds the
	// slice, or "" when the slice is free.
	Holder string
	// Reservation is the holder's reservation (placement group) ID, from
	// the Lease's goray.dev/reservation annotation.
	Reservation string
	// Expires is when the Lease ends unless its holder renews it; zero
	// when the slice is free.
	Expires time.Time
	// Problem says why the slice is not whole and usable (a host missing,
	// not Ready or cordoned, mixed shapes), or "".
	Problem string
}

// MissingHost is the node name of a slice host that has no node: the
// slice's topology needs more hosts than its node pool has.
const MissingHost = "(missing)"

// InspectSlices lists the TPU slices of the cluster that cfg points to
// (its Client, REST or Kubeconfig and Context) from the nodes' GKE labels,
// and who holds each from the slice Leases in cfg.Namespace, sorted by
// slice name. It only reads: it lists nodes and gets each slice's Lease,
// which the driver's RBAC (deploy/rbac.yaml) allows. Fields of cfg other than the client and the namespace
// are ignored, so cfg needs no Worker.Image.
func InspectSlices(ctx context.Context, cfg Config) ([]SliceInfo, error) {
	const op = "inspect TPU slices"
	if ctx == nil {
		return nil, backend.Errorf(backend.InvalidArgument, op, "nil context")
	}
	cfg = cfg.withDefaults()
	client, err := cfg.clientset()
	if err != nil {
		return nil, err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, backend.Errorf(apiCode(err), op, "list nodes: %w%s", err, rbacHint(err, "list nodes", cfg.Namespace))
	}
	pools := map[string][]*corev1.Node{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if p := poolOf(n); p != "" {
			pools[p] = append(pools[p], n)
		}
	}
	names := sortedKeys(pools)
	// One get per slice, not a list: the driver's Role (deploy/rbac.yaml)
	// may get Leases but not list them.
	leases := make([]*coordv1.Lease, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inspectParallel)
	for i, pool := range names {
		g.Go(func() error {
			l, err := client.CoordinationV1().Leases(cfg.Namespace).Get(gctx, LeaseName(pool), metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				return nil // free
			case err != nil:
				return backend.Errorf(apiCode(err), op, "get Lease %s/%s of TPU slice %q: %w%s", cfg.Namespace, LeaseName(pool), pool, err, rbacHint(err, "get leases", cfg.Namespace))
			}
			leases[i] = l
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	now := time.Now()
	holders := map[string]backend.PlacementGroupID{}
	out := make([]SliceInfo, 0, len(pools))
	for i, pool := range names {
		si := inspectSlice(pool, pools[pool])
		if leases[i] != nil {
			si.holdBy(leases[i], now, holders)
		}
		out = append(out, si)
	}
	return out, nil
}

// inspectParallel bounds the Lease reads InspectSlices has in flight.
const inspectParallel = 16

// inspectSlice describes one node pool, whole or not.
func inspectSlice(pool string, nodes []*corev1.Node) SliceInfo {
	first := nodes[0]
	accel := first.Labels[tpu.LabelGKEAccelerator]
	if g, err := tpu.ParseGeneration(accel); err == nil {
		accel = string(g)
	}
	si := SliceInfo{SliceState: backend.SliceState{
		Name: pool, Generation: accel, Topology: first.Labels[tpu.LabelGKETopology], ChipsPerHost: tpuChips(first),
	}}
	hosts := nodes
	if plan, err := planSlice(pool, nodes); err != nil {
		si.Problem = err.Error()
		if ordered, err := orderHosts(pool, nodes); err == nil {
			hosts = ordered
		} else {
			hosts = slices.Clone(nodes)
			slices.SortFunc(hosts, func(a, b *corev1.Node) int { return naturalCompare(a.Name, b.Name) })
		}
	} else {
		hosts = plan.hosts
		si.Generation = string(plan.shape.Generation)
		si.ChipsPerHost = plan.shape.ChipsPerHost
	}
	for _, n := range hosts {
		si.Hosts = append(si.Hosts, backend.SliceHostState{Node: runtimeName(n), Alive: nodeUnusable(n) == "", Chips: tpuChips(n)})
	}
	if shape, err := tpu.NewSliceShape(tpu.Generation(si.Generation), si.Topology, si.ChipsPerHost); err == nil {
		for len(si.Hosts) < shape.Hosts() { // draw the chips of missing hosts dead
			si.Hosts = append(si.Hosts, backend.SliceHostState{Node: MissingHost})
		}
	}
	si.Intact = si.Problem == ""
	si.Idle = si.Intact
	return si
}

// holdBy records the holder of an unexpired Lease.
func (si *SliceInfo) holdBy(l *coordv1.Lease, now time.Time, holders map[string]backend.PlacementGroupID) {
	holder := deref(l.Spec.HolderIdentity)
	if holder == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return
	}
	expires := l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
	if !now.Before(expires) {
		return // expired: any driver may take the slice
	}
	si.Holder, si.Reservation, si.Expires = holder, l.Annotations[annotationClaim], expires
	key := holder + "\x00" + si.Reservation
	id, ok := holders[key]
	if !ok {
		id = backend.PlacementGroupID(len(holders) + 1)
		holders[key] = id
	}
	si.ReservedBy, si.Idle = id, false
	si.ReservedName = holder
	if si.Reservation != "" {
		si.ReservedName = fmt.Sprintf("%s (reservation %s)", holder, si.Reservation)
	}
}

// SliceStates returns the slices' states, for ray.FormatSlices and
// ray.SummarizeSlices.
func SliceStates(infos []SliceInfo) []backend.SliceState {
	out := make([]backend.SliceState, len(infos))
	for i, si := range infos {
		out[i] = si.SliceState
	}
	return out
}

// rbacHint is what to check when the API server refused a request of the
// driver's identity (Forbidden), or "": the usual cause is
// deploy/rbac.yaml applied with its ClusterRoleBinding still naming the
// ServiceAccount in namespace "default".
func rbacHint(err error, what, namespace string) string {
	if !apierrors.IsForbidden(err) {
		return ""
	}
	return fmt.Sprintf(" (the identity may not %s: apply backend/kubernetes/deploy/rbac.yaml in namespace %q with the subject namespace of its ClusterRoleBinding set to %q, then check with `kubectl auth can-i %s --as=system:serviceaccount:%s:goray-driver`)",
		what, namespace, namespace, what, namespace)
}
