//go:build e2e

package kubernetes

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/matryer/is"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// waitFileArg is waitFileTask's argument.
type waitFileArg struct {
	Path string
	Add  int
}

// waitFileTask waits (at most two minutes) until the file Path exists (pods
// share the host's file system on the loopback network), then returns its
// host's TPU_WORKER_ID plus Add.
var waitFileTask = ray.NewTask("k8stest.waitfile", func(ctx context.Context, a waitFileArg) (int, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(a.Path); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	rc, _ := ray.Runtime(ctx)
	id, err := strconv.Atoi(rc.Environ()["TPU_WORKER_ID"])
	return id + a.Add, err
})

// TestE2EAPIServerOutage: work on a reserved slice rides out a
// control-plane outage longer than twice the Lease duration: the API server
// is stopped while a task runs on each host and started again; the tasks
// return the right answers with no retry and no new pod, the slice's Lease
// is this driver's and renewed again once the API server answers, and the
// slice runs more work afterwards.
func TestE2EAPIServerOutage(t *testing.T) {
	is := is.New(t)
	cp := startHarness(t)
	ctx := t.Context()
	_, err := cp.AddTPUNodePool(ctx, kubeharness.NodePool{Name: "slice-a", Generation: "v6e", Topology: "2x4", ChipsPerHost: 4})
	is.NoErr(err)
	client, err := k8s.NewForConfig(driverConfig(t, cp))
	is.NoErr(err)
	const lease = 4 * time.Second
	cfg := testConfig()
	cfg.Identity, cfg.Client, cfg.Worker.Image = "driver-a", client, workerImage
	cfg.Lease = LeaseConfig{Duration: lease}
	b, err := New(ctx, cfg)
	is.NoErr(err)
	c, err := ray.NewCluster(ctx, b, nil)
	is.NoErr(err)
	defer c.Close()
	spg, err := ray.NewSlicePlacementGroup(ctx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerVM: 4})
	is.NoErr(err)
	created := b.runner.created.Load()

	release := filepath.Join(t.TempDir(), "release")
	type result struct {
		got []int
		err error
	}
	work := make(chan result, 1)
	go func() {
		got, err := ray.RunOnSlice(ctx, spg, waitFileTask, waitFileArg{Path: release, Add: 10})
		work <- result{got, err}
	}()

	is.NoErr(cp.StopAPIServer())
	stopped := time.Now()
	time.Sleep(2 * lease) // the outage; no work can have ended: it waits for the file
	is.NoErr(cp.StartAPIServer())
	outage := time.Since(stopped)
	t.Logf("the API server was away for %v (Lease %v)", outage.Round(100*time.Millisecond), lease)
	is.True(outage > 2*lease)
	// The work still runs; let it finish now.
	select {
	case r := <-work:
		t.Fatalf("the work ended during the outage: %v %v", r.got, r.err)
	default:
	}
	is.NoErr(os.WriteFile(release, nil, 0o644))
	var r result
	select {
	case r = <-work:
	case <-time.After(time.Minute):
		t.Fatal("the work did not finish after the outage")
	}
	is.NoErr(r.err)
	is.Equal(len(r.got), 2)
	is.Equal(r.got[0]+r.got[1], 21) // hosts 0 and 1, plus 10 each

	// The Lease is still this driver's, renewed since the API server came
	// back.
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := cp.Client().CoordinationV1().Leases("default").Get(ctx, LeaseName("slice-a"), metav1.GetOptions{})
		is.NoErr(err)
		is.Equal(deref(l.Spec.HolderIdentity), "driver-a")
		if l.Spec.RenewTime.Time.After(stopped.Add(outage)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Lease was not renewed after the outage: renewed %v", l.Spec.RenewTime)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// More work on the same pods.
	got, err := ray.RunOnSlice(ctx, spg, waitFileTask, waitFileArg{Path: release, Add: 20})
	is.NoErr(err)
	is.Equal(got[0]+got[1], 41)
	is.Equal(b.runner.created.Load(), created) // no pod was replaced: nothing restarted
	is.NoErr(spg.Release(ctx))
}
