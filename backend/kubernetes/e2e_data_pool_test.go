//go:build e2e

package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/internal/kubeharness"
	"github.com/goray-dev/goray/ray"
)

// k8sModel stands for a model loaded once per actor: the constructor
// counts its calls in the worker process.
type k8sModel struct {
	id  string // this actor
	nth int64  // the constructor calls of its process, this one included
}

// k8sModelLoads counts the constructor calls of k8sModelClass in this
// process (a worker pod's).
var k8sModelLoads atomic.Int64

// inferred is a row as a pool actor answers it.
type inferred struct {
	V     int
	Actor string // the actor's id
	Pod   string // the worker pod it runs in
	Nth   int64  // constructor calls in that pod's process when it was made
}

var (
	k8sModelClass = ray.NewActorClass("k8stest.model", func(ctx context.Context, _ int) (*k8sModel, error) {
		var b [8]byte
		rand.Read(b[:])
		return &k8sModel{id: hex.EncodeToString(b[:]), nth: k8sModelLoads.Add(1)}, nil
	})
	// k8sInfer answers a batch as inference would, taking its time: the
	// load a pool serves.
	k8sInfer = data.NewBatchMethod(k8sModelClass, "infer", func(ctx context.Context, m *k8sModel, xs []int) ([]inferred, error) {
		time.Sleep(20 * time.Millisecond) // the work of a batch, not synchronization
		out := make([]inferred, len(xs))
		for i, x := range xs {
			out[i] = inferred{V: 2 * x, Actor: m.id, Pod: os.Getenv("POD_NAME"), Nth: m.nth}
		}
		return out, nil
	})
)

// TestE2EDataPoolKeepsItsSlices: batch inference's shape on a real
// control plane: a pool of 1 to 2 actors, each holding a v6e 2x2 slice
// (one worker pod), serves a steady stream of rows (the driver paces
// them); the worker pods created, counted from the API server's watch,
// are at most the pool's peak actors + 1, so are its slice reservations,
// and each actor's constructor (the model load) ran once in its pod.
func TestE2EDataPoolKeepsItsSlices(t *testing.T) {
	is := is.New(t)
	ctx := t.Context()
	cp, c := slicesCluster(t, "2x2", []string{"slice-a", "slice-b"}, nil)
	_, err := cp.AddCPUNodes(ctx, kubeharness.CPUNodes{Name: "cpu", Count: 1})
	is.NoErr(err)

	// Every worker pod of this cluster created from here on.
	pw, err := cp.Client().CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{LabelSelector: LabelCluster})
	is.NoErr(err)
	created := map[string]bool{}
	var watched sync.WaitGroup
	watched.Go(func() {
		for ev := range pw.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				created[p.Name] = true
			}
		}
	})

	pool := data.Pool[*k8sModel, int]{
		Cluster: c, Class: k8sModelClass, Min: 1, Max: 2,
		Slice:     &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x2", ChipsPerVM: 4},
		GrowAfter: 200 * time.Millisecond,
	}
	// A steady load: rows come at about 750 a second, more than one actor
	// serves (a batch of 10 in 20 ms: 500 rows/s) and less than two do,
	// so that two actors are each idle a quarter of the time.
	const n = 1500
	paced := data.Map(data.Range(n, data.BlockRows(10)), func(_ context.Context, x int) (int, error) {
		time.Sleep(2600 * time.Microsecond) // the producer's pace, not synchronization
		return x, nil
	}, data.Concurrency(2))
	var st data.Stats
	got, err := data.Take(ctx, data.ApplyPool(paced, pool, k8sInfer, data.BatchSize(10)), n+1, data.CollectStats(&st), data.Progress(false))
	is.NoErr(err)
	is.Equal(len(got), n)
	actors := map[string]string{} // actor → pod
	for i, r := range got {
		is.Equal(r.V, 2*i)        // every row, in order
		is.Equal(r.Nth, int64(1)) // the constructor ran once in the actor's pod
		if pod, ok := actors[r.Actor]; ok {
			is.Equal(pod, r.Pod) // an actor stays in its pod
		}
		actors[r.Actor] = r.Pod
	}
	p := st.Operators[2].Pool
	is.True(p != nil)
	releasedAndGone(t, cp, c)
	pw.Stop()
	watched.Wait()
	t.Logf("pool %+v; %d actors answered, in pods %v; worker pods created %d", *p, len(actors), actors, len(created))
	is.True(len(actors) <= p.Started)
	is.Equal(p.SlicesReserved, p.Started) // one slice per actor
	is.True(p.Started <= p.Peak+1)        // reservations: at most peak + 1
	is.True(len(created) <= p.Peak+1)     // worker pods: the same, from the API server
	is.True(len(created) >= len(actors))  // every actor that answered had its pod counted
	for _, pod := range actors {
		is.True(created[pod]) // and it was one of those created
	}
}
