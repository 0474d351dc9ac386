//go:build e2e

package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

type batchModel struct{}

type batchOut struct {
	Text  string
	Batch int    // the size of the batch the request rode in
	Pod   string // the pod that ran it
}

var (
	batchModelClass = ray.NewActorClass("k8stest.batchmodel", func(ctx context.Context, _ struct{}) (*batchModel, error) {
		return &batchModel{}, nil
	})
	batchModelCall = ray.NewMethod(batchModelClass, "call", func(ctx context.Context, m *batchModel, ins []string) ([]batchOut, error) {
		time.Sleep(20 * time.Millisecond) // one model step for the batch
		outs := make([]batchOut, len(ins))
		for i, in := range ins {
			outs[i] = batchOut{Text: "echo:" + in, Batch: len(ins), Pod: os.Getenv("POD_NAME")}
		}
		return outs, nil
	})
)

// TestE2EServeBatched: a serve.Batched deployment on a v6e 2x4 slice of
// worker pods (isolated network): 32 concurrent requests reach the host-0
// pod's actor in batches of at most 8, and each client gets the output of
// its own input.
func TestE2EServeBatched(t *testing.T) {
	is := is.New(t)
	_, c := slicesCluster(t, "2x4", []string{"slice-a"}, nil)
	srv := serve.New(c, nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	go srv.Serve(l)
	defer srv.Shutdown(context.WithoutCancel(t.Context()))
	base := "http://" + l.Addr().String()
	is.NoErr(srv.Deploy(t.Context(), serve.Deployment{
		Name:        "batched",
		Replica:     serve.Actor(batchModelClass, struct{}{}, serve.Batched(batchModelCall, serve.BatchOptions{MaxSize: 8, MaxWait: 50 * time.Millisecond})),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4, MaxConcurrentRequests: 32,
	}))
	var mu sync.Mutex
	most := 0
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			resp, err := http.Post(base+"/batched", "application/json", strings.NewReader(fmt.Sprintf("%q", fmt.Sprint(i))))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var out batchOut
			if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&out) != nil || out.Text != fmt.Sprintf("echo:%d", i) {
				t.Errorf("request %d: status %d, %+v", i, resp.StatusCode, out)
				return
			}
			if out.Batch > 8 || !strings.HasPrefix(out.Pod, "goray-") {
				t.Errorf("request %d rode in a batch of %d on pod %q", i, out.Batch, out.Pod)
			}
			mu.Lock()
			most = max(most, out.Batch)
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Logf("largest batch: %d", most)
	is.True(most > 1) // requests were batched in the pod
}
