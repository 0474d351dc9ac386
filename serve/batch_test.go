package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// batchSizes records the size of every batch echoBatch was called with.
var batchSizes struct {
	sync.Mutex
	sizes []int
}

// echoBatchCall is echo's call for a batch: one model step (the largest
// Step of the batch, once) for all inputs. A batch holding the text
// "short" returns one output too few; one with Fail set fails.
var echoBatchCall = ray.NewMethod(echoClass, "batch", func(ctx context.Context, e *echo, ins []EchoIn) ([]EchoOut, error) {
	batchSizes.Lock()
	batchSizes.sizes = append(batchSizes.sizes, len(ins))
	batchSizes.Unlock()
	var step time.Duration
	outs := make([]EchoOut, 0, len(ins))
	short := false
	for _, in := range ins {
		if in.Fail {
			return nil, errors.New("the model refused")
		}
		short = short || in.Text == "short"
		step = max(step, in.Step)
		outs = append(outs, EchoOut{Text: e.prefix + in.Text})
	}
	if step > 0 {
		accelerator(ctx, step) // one step for the whole batch
	}
	if short {
		outs = outs[:len(outs)-1]
	}
	return outs, nil
})

func takeBatchSizes() []int {
	batchSizes.Lock()
	defer batchSizes.Unlock()
	s := batchSizes.sizes
	batchSizes.sizes = nil
	return s
}

func batchedDeployment(name string, opts serve.BatchOptions, concurrency int) serve.Deployment {
	return serve.Deployment{
		Name: name, Replica: serve.Actor(echoClass, name+":", serve.Batched(echoBatchCall, opts)),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
		MaxConcurrentRequests: concurrency, MaxQueuedRequests: 1024,
	}
}

// TestBatched: concurrent requests reach the replica's method in batches
// of at most MaxSize, each caller gets the output for its own input; a
// lone request goes after MaxWait; a failed batch fails each of its
// requests; a method returning the wrong number of outputs is an error
// naming it; Unary and Batched together are refused.
func TestBatched(t *testing.T) {
	is := is.New(t)
	c, _ := newCluster(t, 1)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	is.NoErr(srv.Deploy(t.Context(), batchedDeployment("b", serve.BatchOptions{MaxSize: 8, MaxWait: 50 * time.Millisecond}, 32)))
	takeBatchSizes()

	t.Run("concurrent requests share batches", func(t *testing.T) {
		is := is.New(t)
		var wg sync.WaitGroup
		for i := range 32 {
			wg.Go(func() {
				code, _, body := post(t, client, base+"/b", EchoIn{Text: fmt.Sprint(i)})
				var out EchoOut
				if code != http.StatusOK || json.Unmarshal(body, &out) != nil || out.Text != fmt.Sprintf("b:%d", i) {
					t.Errorf("request %d: %d %s", i, code, body)
				}
			})
		}
		wg.Wait()
		sizes := takeBatchSizes()
		total, most := 0, 0
		for _, s := range sizes {
			is.True(s >= 1 && s <= 8) // never more than MaxSize
			total += s
			most = max(most, s)
		}
		is.Equal(total, 32)
		is.True(most > 1) // requests were batched
		t.Logf("batch sizes: %v", sizes)
	})

	t.Run("a lone request waits MaxWait, then goes", func(t *testing.T) {
		is := is.New(t)
		t0 := time.Now()
		code, _, body := post(t, client, base+"/b", EchoIn{Text: "alone"})
		is.Equal(code, http.StatusOK)
		is.True(strings.Contains(string(body), "b:alone"))
		is.True(time.Since(t0) >= 50*time.Millisecond)
		is.Equal(takeBatchSizes(), []int{1})
	})

	t.Run("a failed batch fails each request", func(t *testing.T) {
		is := is.New(t)
		code, _, body := post(t, client, base+"/b", EchoIn{Text: "x", Fail: true})
		is.Equal(code, http.StatusInternalServerError)
		is.True(strings.Contains(string(body), "the model refused"))
	})

	t.Run("wrong number of outputs", func(t *testing.T) {
		is := is.New(t)
		code, _, body := post(t, client, base+"/b", EchoIn{Text: "short"})
		is.Equal(code, http.StatusInternalServerError)
		is.True(strings.Contains(string(body), "method servetest.echo.batch returned 0 outputs for a batch of 1 inputs"))
	})

	t.Run("unary and batched together", func(t *testing.T) {
		is := is.New(t)
		d := batchedDeployment("both", serve.BatchOptions{}, 8)
		d.Replica = serve.Actor(echoClass, "x", serve.Unary(echoCall), serve.Batched(echoBatchCall, serve.BatchOptions{}))
		err := srv.Deploy(t.Context(), d)
		is.True(err != nil)
		is.True(strings.Contains(err.Error(), "2 endpoints serve POST /<deployment> (serve.Unary, serve.Batched); pass one"))
	})
}

// BenchmarkBatched compares a batched endpoint with the unbatched one at
// the same concurrency (64 clients, one replica admitting 64 requests),
// on a model whose accelerator runs one 2ms step at a time, whatever the
// batch size (docs/serve.md has results):
//
//	go test ./serve -run '^$' -bench Batched -benchtime 2s -count 3
func BenchmarkBatched(b *testing.B) {
	in := EchoIn{Text: "hello", Step: 2 * time.Millisecond}
	const clients = 64
	deploy := func(b *testing.B, d serve.Deployment) string {
		c, _ := newCluster(b, 1)
		srv := serve.New(c, nil)
		base, _ := startServer(b, srv)
		if err := srv.Deploy(context.Background(), d); err != nil {
			b.Fatal(err)
		}
		return base + "/" + d.Name
	}
	b.Run("unbatched", func(b *testing.B) {
		d := batchedDeployment("bench", serve.BatchOptions{}, clients)
		d.Replica = serve.Actor(echoClass, "bench:", serve.Unary(echoCall))
		load(b, deploy(b, d), in, clients)
	})
	for _, size := range []int{8, 32} {
		b.Run(fmt.Sprintf("batched-%d", size), func(b *testing.B) {
			load(b, deploy(b, batchedDeployment("bench", serve.BatchOptions{MaxSize: size, MaxWait: 5 * time.Millisecond}, clients)), in, clients)
		})
	}
}
