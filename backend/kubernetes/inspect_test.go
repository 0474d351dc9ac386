package kubernetes

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/ray"
)

func TestInspectSlices(t *testing.T) {
	var objs []runtime.Object
	for _, nodes := range [][]*corev1.Node{
		tpuNodes("held", "tpu-v6e-slice", "4x4", 4, 4),
		tpuNodes("free", "tpu-v5p-slice", "2x2x2", 2, 4),
		tpuNodes("short", "tpu-v6e-slice", "4x4", 3, 4),
		tpuNodes("lapsed", "tpu-v6e-slice", "2x2", 1, 4),
		tpuNodes("other", "tpu-v6e-slice", "2x2", 1, 4),
		{cpuNodeObj("cpu-0")},
	} {
		for _, n := range nodes {
			objs = append(objs, n)
		}
	}
	client := checkVersions(fake.NewClientset(objs...))
	ctx := context.Background()
	clk := &clock{t: time.Now()}
	a := newTestLeases(t, client, "driver-a", clk)
	if err := a.Claim(ctx, "7", []string{"held"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Claim(ctx, "8", []string{"other"}); err != nil {
		t.Fatal(err)
	}
	old := &clock{t: time.Now().Add(-time.Hour)} // a driver that stopped renewing an hour ago
	if err := newTestLeases(t, client, "driver-gone", old).Claim(ctx, "3", []string{"lapsed"}); err != nil {
		t.Fatal(err)
	}

	before := len(client.Actions())
	infos, err := InspectSlices(ctx, Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]SliceInfo{}
	var names []string
	for _, si := range infos {
		byName[si.Name] = si
		names = append(names, si.Name)
	}
	tests := []struct {
		slice       string
		holder, res string
		intact      bool
		problem     string
		hosts       []string
		reservedBy  backend.PlacementGroupID
	}{
		{slice: "free", intact: true, hosts: []string{"free-0", "free-1"}},
		{slice: "held", holder: "driver-a", res: "7", intact: true, hosts: []string{"held-0", "held-1", "held-2", "held-3"}, reservedBy: 1},
		{slice: "lapsed", intact: true, hosts: []string{"lapsed-0"}},
		{slice: "other", holder: "driver-a", res: "8", intact: true, hosts: []string{"other-0"}, reservedBy: 2},
		{slice: "short", problem: "has 3 of its 4 hosts", hosts: []string{"short-0", "short-1", "short-2", MissingHost}},
	}
	t.Run("sorted, TPU pools only", func(t *testing.T) {
		is := is.New(t)
		is.Equal(names, []string{"free", "held", "lapsed", "other", "short"})
	})
	for _, tt := range tests {
		t.Run(tt.slice, func(t *testing.T) {
			is := is.New(t)
			si := byName[tt.slice]
			is.Equal(si.Holder, tt.holder)
			is.Equal(si.Reservation, tt.res)
			is.Equal(si.ReservedBy, tt.reservedBy)
			is.Equal(si.Intact, tt.intact)
			is.Equal(si.Idle, tt.intact && tt.holder == "")
			is.Equal(si.Expires.IsZero(), tt.holder == "")
			is.Equal(si.Problem == "", tt.problem == "")
			is.True(strings.Contains(si.Problem, tt.problem)) // names what is wrong
			var hosts []string
			for _, h := range si.Hosts {
				hosts = append(hosts, h.Node)
				if h.Node == MissingHost {
					is.True(!h.Alive) // a missing host is drawn dead
					continue
				}
				is.True(h.Alive)
				is.Equal(h.Chips, 4)
			}
			is.Equal(hosts, tt.hosts)
		})
	}
	t.Run("the chip grids name the holder", func(t *testing.T) {
		is := is.New(t)
		is.Equal(byName["held"].Generation, "v6e")
		grid := ray.FormatSlices(SliceStates(infos))
		is.True(strings.Contains(grid, "held (v6e 4x4, 4 hosts): A = driver-a (reservation 7)\n  A0 A0 A1 A1\n"))
		is.True(strings.Contains(grid, "free (v5p 2x2x2, 2 hosts): free\n"))
		is.True(strings.Contains(grid, "other (v6e 2x2, 1 hosts): B = driver-a (reservation 8)\n"))
	})
	t.Run("it only reads", func(t *testing.T) {
		is := is.New(t)
		verbs := map[string]int{}
		for _, a := range client.Actions()[before:] {
			verbs[a.GetVerb()+" "+a.GetResource().Resource]++
		}
		is.Equal(verbs, map[string]int{"list nodes": 1, "get leases": 5}) // one get per slice: the driver's Role cannot list Leases
		l, err := getLease(t, client, "held")
		is.NoErr(err)
		is.Equal(*l.Spec.HolderIdentity, "driver-a")
	})
}

func TestInspectSlicesForbidden(t *testing.T) {
	is := is.New(t)
	client := fake.NewClientset(tpuNodes("pool", "tpu-v6e-slice", "2x2", 1, 4)[0])
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(leaseGR, "goray-slice-pool", errors.New("RBAC: no"))
	})
	_, err := InspectSlices(context.Background(), Config{Client: client, Namespace: "ml"})
	is.True(err != nil)
	is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
	is.True(strings.Contains(err.Error(), `get Lease ml/goray-slice-pool of TPU slice "pool"`)) // names the Lease
	is.True(strings.Contains(err.Error(), `with the subject namespace of its ClusterRoleBinding set to "ml"`))
}

// A ClusterRoleBinding left naming namespace default: listing nodes is
// forbidden, and the error says what to check.
func TestInspectSlicesNodesForbidden(t *testing.T) {
	is := is.New(t)
	client := fake.NewClientset()
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New(`User "system:serviceaccount:ml:goray-driver" cannot list resource "nodes"`))
	})
	_, err := InspectSlices(context.Background(), Config{Client: client, Namespace: "ml"})
	is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
	t.Log(err)
	is.True(strings.Contains(err.Error(), `apply backend/kubernetes/deploy/rbac.yaml in namespace "ml" with the subject namespace of its ClusterRoleBinding set to "ml"`))
	is.True(strings.Contains(err.Error(), "kubectl auth can-i list nodes --as=system:serviceaccount:ml:goray-driver"))
}

func TestInspectSlicesErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"missing kubeconfig", Config{Kubeconfig: "/nonexistent/kubeconfig"}, "/nonexistent/kubeconfig"},
		{"unknown context", Config{Kubeconfig: "testdata/none", Context: "nope"}, `Context "nope"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			_, err := InspectSlices(context.Background(), tt.cfg)
			is.True(err != nil)
			is.Equal(backend.CodeOf(err), backend.InvalidArgument)
			is.True(strings.Contains(err.Error(), tt.want)) // names the bad setting
		})
	}
}
