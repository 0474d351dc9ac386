//go:build e2e

package kubernetes

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/goray-dev/goray/internal/kubeharness"
)

// provisionTrace records, with the time each was seen, the pod and Lease
// changes of a provisioned reservation and the driver's logs, to show
// where BenchmarkE2EProvisionV6e4x4's nodes-to-workers goes
// (GORAY_E2E_TRACE=1).
type provisionTrace struct {
	mu     sync.Mutex
	events []traceEvent
	seen   map[string]string // pod → last state noted
}

type traceEvent struct {
	at   time.Time
	what string
}

func (tr *provisionTrace) note(what string) {
	tr.mu.Lock()
	tr.events = append(tr.events, traceEvent{time.Now(), what})
	tr.mu.Unlock()
}

func podState(p *corev1.Pod) string {
	s := string(p.Status.Phase)
	if p.Spec.NodeName != "" {
		s += " on " + p.Spec.NodeName
	}
	if p.DeletionTimestamp != nil {
		s += " deleting"
	}
	return s
}

func startProvisionTrace(tb testing.TB, client k8s.Interface) *provisionTrace {
	tr := &provisionTrace{seen: map[string]string{}}
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("default"))
	pod := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		st := podState(p)
		if deleted {
			st = "gone"
		}
		tr.mu.Lock()
		same := tr.seen[p.Name] == st
		tr.seen[p.Name] = st
		tr.mu.Unlock()
		if !same {
			tr.note("pod " + p.Name + ": " + st)
		}
	}
	_, _ = f.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { pod(o, false) },
		UpdateFunc: func(_, o any) { pod(o, false) },
		DeleteFunc: func(o any) { pod(o, true) },
	})
	_, _ = f.Coordination().V1().Leases().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { tr.note("lease " + o.(*coordv1.Lease).Name + " created") },
	})
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return tr
}

// handler is a slog handler that notes the driver's logs.
func (tr *provisionTrace) handler() slog.Handler { return traceHandler{tr} }

type traceHandler struct{ tr *provisionTrace }

func (h traceHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h traceHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("log " + r.Message)
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.tr.note(b.String())
	return nil
}
func (h traceHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h traceHandler) WithGroup(string) slog.Handler      { return h }

// workerLogs notes, at the times their workers logged them, when the
// worker of each pod matching selector listened and when its driver
// connected (the workers log at level info).
func (tr *provisionTrace) workerLogs(tb testing.TB, cp *kubeharness.ControlPlane, selector string) {
	pods, err := cp.Client().CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range pods.Items {
		logs, err := cp.PodLogs("default", p.Name, "worker")
		if err != nil {
			tr.note("no logs of pod " + p.Name + ": " + err.Error())
			continue
		}
		for line := range strings.Lines(logs) {
			var what string
			switch {
			case strings.Contains(line, "goray worker: serving"):
				what = "listening"
			case strings.Contains(line, "goray worker: driver connected"):
				what = "driver connected"
			default:
				continue
			}
			ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				continue
			}
			tr.mu.Lock()
			tr.events = append(tr.events, traceEvent{at, "worker " + p.Name + ": " + what})
			tr.mu.Unlock()
		}
	}
}

// dump logs the events since start, with times relative to zero, and
// forgets them.
func (tr *provisionTrace) dump(tb testing.TB, title string, start, zero time.Time, marks map[string]time.Time) {
	tr.mu.Lock()
	evs := tr.events
	tr.events = nil
	tr.mu.Unlock()
	for k, t := range marks {
		evs = append(evs, traceEvent{t, "mark " + k})
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	var b strings.Builder
	for _, e := range evs {
		if e.at.Before(start) {
			continue
		}
		fmt.Fprintf(&b, "%+8.1fms %s\n", float64(e.at.Sub(zero).Microseconds())/1000, e.what)
	}
	tb.Logf("trace of %s (ms from the nodes created):\n%s", title, b.String())
}
