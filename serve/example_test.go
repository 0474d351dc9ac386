package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// A model is an actor class; its methods are the deployment's endpoints.
// Register them at package level.
type Greeter struct{ greeting string }

type GreetIn struct{ Name string }

type GreetOut struct {
	Text     string
	WorkerID string
}

var (
	greeter = ray.NewActorClass("serve_example.greeter", func(ctx context.Context, greeting string) (*Greeter, error) {
		return &Greeter{greeting: greeting}, nil
	})
	greet = ray.NewMethod(greeter, "greet", func(ctx context.Context, g *Greeter, in GreetIn) (GreetOut, error) {
		rc, _ := ray.Runtime(ctx)
		return GreetOut{Text: g.greeting + ", " + in.Name, WorkerID: rc.Env("TPU_WORKER_ID")}, nil
	})
	greetWords = serve.NewStream(greeter, "words", func(ctx context.Context, g *Greeter, in GreetIn, send func(string) error) error {
		for _, w := range []string{g.greeting, in.Name} {
			if err := send(w); err != nil {
				return err
			}
		}
		return nil
	})
)

func Example() {
	ctx := context.Background()
	// A simulated cluster of two v6e 2x4 slices, two 4-chip hosts each.
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x4", ChipsPerHost: 4, Count: 2}}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	srv := serve.New(c, nil)
	defer srv.Shutdown(ctx)
	err = srv.Deploy(ctx, serve.Deployment{
		Name:        "greeter",
		Replica:     serve.Actor(greeter, "Hello", serve.Unary(greet), serve.Streaming(greetWords)),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
		MinReplicas: 1, MaxReplicas: 2,
	})
	if err != nil {
		log.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	client := ts.Client()
	defer client.CloseIdleConnections()

	resp, err := client.Post(ts.URL+"/greeter", "application/json", strings.NewReader(`{"Name": "TPU"}`))
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(os.Stdout, resp.Body)
	resp.Body.Close()

	resp, err = client.Post(ts.URL+"/greeter/stream", "application/json", strings.NewReader(`{"Name": "TPU"}`))
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(os.Stdout, resp.Body)
	resp.Body.Close()

	st, _ := srv.Status().Deployment("greeter")
	fmt.Println("ready:", st.Ready, "slices held:", st.SlicesHeld, "hosts:", st.Replicas[0].Hosts)
	// Output:
	// {"Text":"Hello, TPU","WorkerID":"0"}
	// data: "Hello"
	//
	// data: "TPU"
	//
	// event: done
	// data: {}
	//
	// ready: 1 slices held: 1 hosts: [v6e-8-0-w0 v6e-8-0-w1]
}

// greetAll is greet for a batch: one call for every request that reached
// the replica together, one output per input, in order.
var greetAll = ray.NewMethod(greeter, "greetAll", func(ctx context.Context, g *Greeter, ins []GreetIn) ([]GreetOut, error) {
	outs := make([]GreetOut, len(ins))
	for i, in := range ins {
		outs[i] = GreetOut{Text: fmt.Sprintf("%s, %s (batch of %d)", g.greeting, in.Name, len(ins))}
	}
	return outs, nil
})

// Batched gathers the requests that reach a replica at once into one call
// (Ray Serve's @serve.batch): here three clients, one batch.
func ExampleBatched() {
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x4", ChipsPerHost: 4}}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	srv := serve.New(c, nil)
	defer srv.Shutdown(ctx)
	err = srv.Deploy(ctx, serve.Deployment{
		Name: "greeter",
		// Up to 8 requests per call; the first waits up to 100ms for more.
		Replica:     serve.Actor(greeter, "Hello", serve.Batched(greetAll, serve.BatchOptions{MaxSize: 8, MaxWait: 100 * time.Millisecond})),
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
		MaxConcurrentRequests: 8, // at least MaxSize, or batches cannot fill
	})
	if err != nil {
		log.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	client := ts.Client()
	defer client.CloseIdleConnections()

	names := []string{"v6e", "v5p", "v7x"}
	replies := make([]string, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			resp, err := client.Post(ts.URL+"/greeter", "application/json", strings.NewReader(`{"Name": "`+name+`"}`))
			if err != nil {
				log.Fatal(err)
			}
			defer resp.Body.Close()
			var out GreetOut
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				log.Fatal(err)
			}
			replies[i] = out.Text
		})
	}
	wg.Wait()
	for _, r := range replies {
		fmt.Println(r)
	}
	// Output:
	// Hello, v6e (batch of 3)
	// Hello, v5p (batch of 3)
	// Hello, v7x (batch of 3)
}
