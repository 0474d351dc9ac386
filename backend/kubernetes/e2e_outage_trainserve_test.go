//go:build e2e

package kubernetes

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/goray-dev/goray/serve"
	"github.com/goray-dev/goray/train"
)

// TestE2EAPIServerOutageUnderTrainAndServe: kube-apiserver is stopped for
// more than twice the Lease duration while a train run all-reduces across
// the two pods of one v6e 2x4 slice and a serve deployment answers from
// the other slice. The run goes on through the outage and finishes in its
// first attempt with the exact answer; every request to the deployment
// during the outage succeeds; no pod is replaced.
func TestE2EAPIServerOutageUnderTrainAndServe(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	const lease = 4 * time.Second
	cp, c := slicesCluster(t, "2x4", []string{"slice-a", "slice-b"}, func(cfg *Config) {
		cfg.Lease = LeaseConfig{Duration: lease}
	})
	srv, base := serveProcess(t, c, func(d *serve.Deployment) { d.MinReplicas, d.Idempotent = 1, true })
	request := func() error {
		resp, err := http.Post(base+"/proc/where", "application/json", strings.NewReader("{}"))
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return &httpStatusError{resp.StatusCode}
		}
		return nil
	}
	is.NoErr(request())

	// The outage starts at the run's third iteration.
	var outage struct {
		before       map[types.UID]bool
		took         time.Duration
		requests, ok atomic.Int64
		err          error
	}
	done := make(chan struct{})
	var started atomic.Bool
	onReport := func(r train.Report) {
		if r.Iteration != 3 || !started.CompareAndSwap(false, true) {
			return
		}
		go func() {
			defer close(done)
			pods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelCluster})
			if err != nil {
				outage.err = err
				return
			}
			outage.before = map[types.UID]bool{}
			for _, p := range pods.Items {
				outage.before[p.UID] = true
			}
			if outage.err = cp.StopAPIServer(); outage.err != nil {
				return
			}
			stopped := time.Now()
			for time.Since(stopped) < 2*lease+lease/2 {
				outage.requests.Add(1)
				if err := request(); err == nil {
					outage.ok.Add(1)
				} else {
					t.Errorf("request during the outage: %v", err)
				}
				time.Sleep(200 * time.Millisecond)
			}
			outage.err = cp.StartAPIServer()
			outage.took = time.Since(stopped)
		}()
	}
	const iters = 120
	tr, err := train.New(c, k8sCounting, k8sCountCfg{Iters: iters, Pause: 200 * time.Millisecond},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerHost: 4},
		train.RunConfig{Name: "outage", Progress: train.ProgressOff, OnReport: onReport})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	is.NoErr(err)
	<-done
	is.NoErr(outage.err)
	t.Logf("kube-apiserver away for %v (Lease %v) during the run; %d of %d requests to the deployment answered meanwhile",
		outage.took.Round(100*time.Millisecond), lease, outage.ok.Load(), outage.requests.Load())
	is.True(outage.took > 2*lease)
	is.Equal(res.Attempts, 1)                      // no restart
	is.Equal(len(res.Failures), 0)                 // nothing failed
	is.Equal(res.Metrics["sum"], float64(iters*3)) // 1+2 per iteration: exact
	is.True(outage.requests.Load() > 0)
	is.Equal(outage.ok.Load(), outage.requests.Load()) // every request during the outage answered

	// The deployment's pods are those from before the outage.
	is.NoErr(request())
	var pods []corev1.Pod
	is.NoErr(wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelCluster})
		if err != nil {
			return false, err
		}
		pods = l.Items
		return len(pods) == 2, nil // the replica's two hosts, once the run's are deleted
	}))
	for _, p := range pods {
		is.True(outage.before[p.UID]) // not replaced
	}
	is.NoErr(srv.Shutdown(ctx))
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

type httpStatusError struct{ code int }

func (e *httpStatusError) Error() string { return "HTTP status " + http.StatusText(e.code) }
