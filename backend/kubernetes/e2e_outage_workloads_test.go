//go:build e2e

package kubernetes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/serve"
	"github.com/goray-dev/goray/train"
)

// outageLease is the Lease duration of the outage tests: the API server
// is kept away for more than twice it.
const outageLease = 4 * time.Second

// workerPodUIDs returns the UID of each of the cluster's worker pods by
// name, all of which must be Running.
func workerPodUIDs(ctx context.Context, cp *kubeharness.ControlPlane) (map[string]string, error) {
	pods, err := cp.Client().CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: LabelCluster})
	if err != nil {
		return nil, err
	}
	uids := map[string]string{}
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			return nil, fmt.Errorf("pod %s is %s (deleting: %v)", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
		}
		uids[p.Name] = string(p.UID)
	}
	return uids, nil
}

// waitLeasesRenewed waits (up to 30 s) until the Lease of each slice is
// held by holder and renewed after since.
func waitLeasesRenewed(ctx context.Context, cp *kubeharness.ControlPlane, holder string, since time.Time, slices ...string) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range slices {
		for {
			l, err := cp.Client().CoordinationV1().Leases("default").Get(ctx, LeaseName(s), metav1.GetOptions{})
			if err != nil {
				return err
			}
			if h := deref(l.Spec.HolderIdentity); h != holder {
				return fmt.Errorf("the Lease of %s is held by %q, not %q", s, h, holder)
			}
			if l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.After(since) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the Lease of %s was not renewed after %v: renewed %v", s, since, l.Spec.RenewTime)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// TestE2ETrainRidesOutAPIServerOutage: a train run on a v6e 4x4 (four
// ranks, one per worker pod) with checkpoints goes on through a
// control-plane outage longer than twice the Lease duration: the API
// server is stopped at iteration 2 and started again once the run has
// reported and checkpointed five more iterations without it; the run
// finishes in its first attempt with the exact answer, no worker pod was
// replaced, and the slice's Lease is this driver's, renewed once the API
// server answers.
func TestE2ETrainRidesOutAPIServerOutage(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "4x4", []string{"slice-a"}, func(cfg *Config) {
		cfg.Lease = LeaseConfig{Duration: outageLease}
	})

	const stopAt, startAt, iters = 2, 8, 12
	var (
		stopped, started time.Time
		pods             map[string]string
		slice            string
		duringOutage     int // reports (each with a checkpoint) while the API server was away
		injectErr        error
	)
	onReport := func(r train.Report) {
		if injectErr != nil || r.Attempt != 0 {
			return
		}
		switch {
		case r.Iteration == stopAt:
			slice = r.Slices[0]
			if pods, injectErr = workerPodUIDs(ctx, cp); injectErr != nil {
				return
			}
			injectErr = cp.StopAPIServer()
			stopped = time.Now()
		case r.Iteration > stopAt && r.Iteration < startAt:
			duringOutage++
		case r.Iteration == startAt:
			// Rank 0's report waits here, so the run cannot end before
			// the API server is back.
			if d := 2*outageLease - time.Since(stopped); d > 0 {
				time.Sleep(d) // the outage goes on past twice the Lease
			}
			if injectErr = cp.StartAPIServer(); injectErr != nil {
				return
			}
			started = time.Now()
			if injectErr = waitLeasesRenewed(ctx, cp, "driver-a", started, slice); injectErr != nil {
				return
			}
			after, err := workerPodUIDs(ctx, cp)
			if err != nil {
				injectErr = err
			} else if !maps.Equal(pods, after) {
				injectErr = fmt.Errorf("worker pods before the outage %v, after %v", pods, after)
			}
		}
	}
	tr, err := train.New(c, k8sCounting, k8sCountCfg{Iters: iters, Pause: 100 * time.Millisecond},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "4x4", ChipsPerHost: 4},
		train.RunConfig{Name: "outage", Progress: train.ProgressOff, MaxFailures: 1, OnReport: onReport})
	is.NoErr(err)
	res, err := tr.Fit(ctx)
	if !stopped.IsZero() && started.IsZero() {
		is.NoErr(cp.StartAPIServer()) // the run ended during the outage: bring it back for the cleanup
		t.Fatalf("the run ended during the outage: %v", err)
	}
	t.Logf("the API server was away for %v (Lease %v); %d reports with checkpoints meanwhile",
		started.Sub(stopped).Round(100*time.Millisecond), outageLease, duringOutage)
	is.NoErr(err)
	is.NoErr(injectErr)
	is.Equal(res.Attempts, 1)                       // no restart
	is.Equal(len(res.Failures), 0)                  // no failure
	is.Equal(res.Metrics["sum"], float64(iters*10)) // 1+2+3+4 per iteration
	is.Equal(duringOutage, startAt-stopAt-1)        // the run went on meanwhile
	is.True(started.Sub(stopped) > 2*outageLease)   // past twice the Lease
	is.Equal(len(pods), 4)                          // one pod per host of the 4x4
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

// TestE2EServeRidesOutAPIServerOutage: a serve.Process deployment of two
// v6e 2x4 replicas serves 20 concurrent clients, each checking every
// answer (the SHA-256 of a random body), while the API server is stopped
// for more than twice the Lease duration: every request succeeds, each
// client's requests keep completing during the outage, the deployment's
// status answers meanwhile, and afterwards the same replicas on the same
// pods serve, with the slices' Leases renewed.
func TestE2EServeRidesOutAPIServerOutage(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "2x4", []string{"slice-a", "slice-b"}, func(cfg *Config) {
		cfg.Lease = LeaseConfig{Duration: outageLease}
	})
	srv, base := serveProcess(t, c, func(d *serve.Deployment) {
		d.MinReplicas, d.Idempotent, d.MaxConcurrentRequests, d.MaxQueuedRequests = 2, true, 32, 1024
	})
	replicaIDs := func() []string {
		st, _ := srv.Status().Deployment("proc")
		var ids []string
		for _, r := range st.Replicas {
			ids = append(ids, r.ID)
		}
		slices.Sort(ids)
		return ids
	}
	replicas := replicaIDs()
	is.Equal(len(replicas), 2)
	pods, err := workerPodUIDs(ctx, cp)
	is.NoErr(err)
	is.Equal(len(pods), 4) // two hosts for each of the two replicas

	const clients = 20
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	var (
		stop     atomic.Bool
		phase    atomic.Int32 // 0 before the outage, 1 during, 2 after
		done     [clients][3]atomic.Int64
		slowest  atomic.Int64 // the longest request during the outage, in ns
		failures sync.Map
		wg       sync.WaitGroup
	)
	for i := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			for !stop.Load() {
				body := make([]byte, 1+rng.IntN(4096))
				for j := range body {
					body[j] = byte(rng.Uint32())
				}
				want := sha256.Sum256(body)
				p := phase.Load()
				start := time.Now()
				resp, err := client.Post(base+"/proc/sum", "application/octet-stream", strings.NewReader(string(body)))
				if err != nil {
					failures.Store(i, err.Error())
					return
				}
				var got map[string]string
				err = json.NewDecoder(resp.Body).Decode(&got)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || err != nil {
					failures.Store(i, fmt.Sprintf("status %d, %v", resp.StatusCode, err))
					return
				}
				if got["sha256"] != hex.EncodeToString(want[:]) || got["bytes"] != fmt.Sprint(len(body)) {
					failures.Store(i, fmt.Sprintf("wrong answer %v for %d bytes", got, len(body)))
					return
				}
				if p == 1 && phase.Load() == 1 {
					took := time.Since(start).Nanoseconds()
					for s := slowest.Load(); took > s && !slowest.CompareAndSwap(s, took); s = slowest.Load() {
					}
				}
				if p == phase.Load() { // sent and answered within the phase
					done[i][p].Add(1)
				}
			}
		})
	}
	// waitEach waits (up to a minute) until every client has had a
	// request answered within phase p, or one failed.
	waitEach := func(p int) error {
		deadline := time.Now().Add(time.Minute)
		for i := 0; i < clients; {
			failed := false
			failures.Range(func(any, any) bool { failed = true; return false })
			switch {
			case failed:
				return fmt.Errorf("a request failed")
			case done[i][p].Load() > 0:
				i++
			case time.Now().After(deadline):
				return fmt.Errorf("client %d had no request answered in phase %d", i, p)
			default:
				time.Sleep(20 * time.Millisecond)
			}
		}
		return nil
	}
	outage := func() error {
		if err := waitEach(0); err != nil {
			return err
		}
		if err := cp.StopAPIServer(); err != nil {
			return err
		}
		stopped := time.Now()
		phase.Store(1)
		err := waitEach(1)
		// The status needs no API server either.
		if ids := replicaIDs(); err == nil && !slices.Equal(ids, replicas) {
			err = fmt.Errorf("replicas during the outage %v, before %v", ids, replicas)
		}
		if d := 2*outageLease - time.Since(stopped); d > 0 {
			time.Sleep(d) // the outage goes on past twice the Lease
		}
		during := make([]int64, clients)
		for i := range clients {
			during[i] = done[i][1].Load()
		}
		phase.Store(2)
		if serr := cp.StartAPIServer(); err == nil {
			err = serr
		}
		away := time.Since(stopped)
		t.Logf("the API server was away for %v (Lease %v); requests answered meanwhile per client: %v; the slowest took %v",
			away.Round(100*time.Millisecond), outageLease, during, time.Duration(slowest.Load()).Round(time.Millisecond))
		if err != nil {
			return err
		}
		if away <= 2*outageLease {
			return fmt.Errorf("the outage lasted %v", away)
		}
		if err := waitLeasesRenewed(ctx, cp, "driver-a", stopped.Add(away), "slice-a", "slice-b"); err != nil {
			return err
		}
		return waitEach(2)
	}
	err = outage()
	stop.Store(true)
	wg.Wait()
	failures.Range(func(k, v any) bool {
		t.Errorf("client %v: %v", k, v)
		return true
	})
	is.NoErr(err)
	var total [3]int64
	for i := range clients {
		for p := range 3 {
			total[p] += done[i][p].Load()
		}
	}
	t.Logf("requests answered before, during and after the outage: %v", total)
	is.Equal(replicaIDs(), replicas) // no replica was replaced
	st, _ := srv.Status().Deployment("proc")
	is.Equal(st.Ready, 2)
	after, err := workerPodUIDs(ctx, cp)
	is.NoErr(err)
	is.Equal(after, pods) // no pod was replaced
	is.NoErr(srv.Shutdown(ctx))
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}

type k8sFailOnceCfg struct {
	Iters    int
	Pause    time.Duration
	FailFile string
}

// k8sFailOnce is k8sCounting whose rank 0 fails its first attempt after
// the report of an iteration at which the file FailFile exists (pods share
// the host's file system).
var k8sFailOnce = train.NewLoop("k8stest.failonce", func(ctx context.Context, w *train.Worker, cfg k8sFailOnceCfg) error {
	sum := 0.0
	if data, err := w.LoadCheckpoint(ctx); err != nil {
		return err
	} else if data != nil {
		if err := json.Unmarshal(data, &sum); err != nil {
			return err
		}
	}
	for it := w.Iteration(); it < cfg.Iters; it++ {
		xs := []float64{float64(w.Rank() + 1)}
		if err := train.AllReduce(ctx, w, xs, train.Sum); err != nil {
			return err
		}
		sum += xs[0]
		var ck []byte
		if w.Rank() == 0 {
			ck, _ = json.Marshal(sum)
		}
		if err := w.Report(ctx, train.Metrics{"sum": sum}, ck); err != nil {
			return err
		}
		if _, err := os.Stat(cfg.FailFile); err == nil && w.Attempt() == 0 && w.Rank() == 0 {
			return &train.WorkerFailedError{Rank: w.Rank(), Cause: "failed on purpose during the outage"}
		}
		select {
		case <-time.After(cfg.Pause):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
})

// signalHandler is a slog.Handler that closes seen at the first record
// whose message contains msg.
type signalHandler struct {
	msg  string
	once *sync.Once
	seen chan struct{}
}

func (h signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.msg) {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}
func (h signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h signalHandler) WithGroup(string) slog.Handler      { return h }

// TestE2ETrainRestartDuringAPIServerOutage: a train run whose worker
// fails while the API server is away restarts once the API server is
// back: the restart's reservation, which fails with Unavailable while the
// API server does not answer, is asked again within ReserveTimeout
// instead of ending the run. The run finishes in its second attempt from
// its checkpoint with the exact answer.
func TestE2ETrainRestartDuringAPIServerOutage(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "2x4", []string{"slice-a"}, func(cfg *Config) {
		cfg.Lease = LeaseConfig{Duration: outageLease}
	})
	fail := filepath.Join(t.TempDir(), "fail")
	var stopped time.Time
	var injectErr error
	onReport := func(r train.Report) {
		switch {
		case r.Attempt == 0 && r.Iteration == 2:
			injectErr = cp.StopAPIServer()
			stopped = time.Now()
		case r.Attempt == 0 && r.Iteration == 3 && injectErr == nil:
			injectErr = os.WriteFile(fail, nil, 0o644) // rank 0 fails after this report
		}
	}
	retrying := signalHandler{msg: "could not reserve slices", once: new(sync.Once), seen: make(chan struct{})}
	type fit struct {
		res *train.Result
		err error
	}
	fitted := make(chan fit, 1)
	const iters = 8
	tr, err := train.New(c, k8sFailOnce, k8sFailOnceCfg{Iters: iters, Pause: 100 * time.Millisecond, FailFile: fail},
		train.ScalingConfig{AcceleratorVersion: "v6e", Topology: "2x4", ChipsPerHost: 4, ReserveTimeout: 2 * time.Minute},
		train.RunConfig{Name: "restart", Progress: train.ProgressOff, MaxFailures: 1, OnReport: onReport, Logger: slog.New(retrying)})
	is.NoErr(err)
	go func() {
		res, err := tr.Fit(ctx)
		fitted <- fit{res, err}
	}()
	// The API server comes back once the restart's reservation has failed
	// for want of it and the outage lasted twice the Lease.
	var f fit
	select {
	case <-retrying.seen:
	case f = <-fitted:
		if !stopped.IsZero() {
			is.NoErr(cp.StartAPIServer())
		}
		t.Fatalf("the run ended during the outage: %v", f.err)
	case <-time.After(2 * time.Minute):
		t.Fatal("no reservation was retried during the outage")
	}
	if d := 2*outageLease - time.Since(stopped); d > 0 {
		time.Sleep(d)
	}
	is.NoErr(cp.StartAPIServer())
	t.Logf("the API server was away for %v (Lease %v)", time.Since(stopped).Round(100*time.Millisecond), outageLease)
	select {
	case f = <-fitted:
	case <-time.After(2 * time.Minute):
		t.Fatal("the run did not finish after the outage")
	}
	is.NoErr(f.err)
	is.NoErr(injectErr)
	is.Equal(f.res.Attempts, 2)                      // restarted once, after the outage
	is.Equal(len(f.res.Failures), 1)                 // the worker's failure only
	is.Equal(f.res.Metrics["sum"], float64(iters*3)) // 1+2 per iteration, as without the failure
	t.Logf("failure: %v; resumed from checkpoint %d", f.res.Failures[0].Cause, f.res.Failures[0].ResumeFrom)
	is.NoErr(c.Close())
	is.NoErr(cp.WaitForPodsGone(ctx, "default", LabelCluster))
}
