package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"slices"
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

// The model of the composition example: one actor per replica, each on a
// v6e 2x2 slice. It "generates" by reversing the token IDs it gets.
type Model struct{}

type ModelIn struct{ IDs []int }

type ModelOut struct {
	IDs   []int
	Slice string // the accelerator type and topology it ran on
}

// The tokenizer sits in front of the model: it calls it through the
// handle in its constructor input, from wherever its actor runs (this
// process on the simulator, a worker process or a pod).
type Tokenizer struct {
	vocab []string
	model serve.DeploymentHandle[ModelIn, ModelOut]
}

type TokenizerConfig struct {
	Vocab []string
	Model serve.DeploymentHandle[ModelIn, ModelOut]
}

type Prompt struct{ Text string }

type Reply struct {
	Text  string
	Slice string
}

var (
	modelClass = ray.NewActorClass("serve_example.model", func(ctx context.Context, _ struct{}) (*Model, error) {
		return &Model{}, nil
	})
	generate = ray.NewMethod(modelClass, "generate", func(ctx context.Context, m *Model, in ModelIn) (ModelOut, error) {
		rc, _ := ray.Runtime(ctx)
		out := slices.Clone(in.IDs)
		slices.Reverse(out)
		return ModelOut{IDs: out, Slice: rc.Env("TPU_ACCELERATOR_TYPE") + " " + rc.Env("TPU_TOPOLOGY")}, nil
	})
	tokenizerClass = ray.NewActorClass("serve_example.tokenizer", func(ctx context.Context, cfg TokenizerConfig) (*Tokenizer, error) {
		return &Tokenizer{vocab: cfg.Vocab, model: cfg.Model}, nil
	})
	complete = ray.NewMethod(tokenizerClass, "complete", func(ctx context.Context, t *Tokenizer, p Prompt) (Reply, error) {
		var ids []int
		for _, w := range strings.Fields(p.Text) {
			id := slices.Index(t.vocab, w)
			if id < 0 {
				return Reply{}, fmt.Errorf("%q is not in the vocabulary", w)
			}
			ids = append(ids, id)
		}
		out, err := t.model.Call(ctx, ModelIn{IDs: ids}) // through the model's router
		if err != nil {
			return Reply{}, err
		}
		words := make([]string, len(out.IDs))
		for i, id := range out.IDs {
			words[i] = t.vocab[id]
		}
		return Reply{Text: strings.Join(words, " "), Slice: out.Slice}, nil
	})
)

// Handle composes deployments, as Ray Serve's DeploymentHandle does: a
// tokenizer deployment calls a model deployment whose replicas each own a
// v6e 2x2 slice, through a typed handle that routes every call to a ready
// model replica (with the model's limits, queue and retries).
func ExampleHandle() {
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{
		{Generation: "v6e", Topology: "2x2", Count: 2}, // the model's replicas
		{Generation: "v6e", Topology: "1x1"},           // the tokenizer's
	}}, nil)
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
		Name:        "model",
		Replica:     serve.Actor(modelClass, struct{}{}, serve.Unary(generate)),
		Accelerator: "v6e", Topology: "2x2",
		MinReplicas: 2, MaxConcurrentRequests: 4, MaxQueuedRequests: 16,
		Idempotent: true, // a call whose replica dies is retried on the other
	})
	if err != nil {
		log.Fatal(err)
	}
	// A typed handle to the model's endpoint; the types are checked now.
	model, err := serve.Handle[ModelIn, ModelOut](srv, "model")
	if err != nil {
		log.Fatal(err)
	}
	err = srv.Deploy(ctx, serve.Deployment{
		Name: "tokenizer",
		// The handle crosses to the tokenizer's actor in its constructor input.
		Replica:     serve.Actor(tokenizerClass, TokenizerConfig{Vocab: strings.Fields("slices of TPU chips serve"), Model: model}, serve.Unary(complete)),
		Accelerator: "v6e", Topology: "1x1",
	})
	if err != nil {
		log.Fatal(err)
	}

	// The driver calls the tokenizer through a handle too...
	tokenizer, err := serve.Handle[Prompt, Reply](srv, "tokenizer")
	if err != nil {
		log.Fatal(err)
	}
	reply, err := tokenizer.Call(ctx, Prompt{Text: "TPU chips serve"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q from the model on a %s slice\n", reply.Text, reply.Slice)
	_, err = tokenizer.Call(ctx, Prompt{Text: "GPU"})
	fmt.Println("error:", err)

	// ... and HTTP clients reach the same chain at POST /tokenizer.
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	client := ts.Client()
	defer client.CloseIdleConnections()
	resp, err := client.Post(ts.URL+"/tokenizer", "application/json", strings.NewReader(`{"Text": "slices of TPU chips"}`))
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(os.Stdout, resp.Body)
	resp.Body.Close()

	// A handle to a deployment the server does not have says which it has.
	_, err = serve.Handle[ModelIn, ModelOut](srv, "llm")
	fmt.Println(errors.Is(err, serve.ErrNoDeployment), err)
	// Output:
	// "serve chips TPU" from the model on a v6e-4 2x2 slice
	// error: serve: deployment "tokenizer": "GPU" is not in the vocabulary (status 500)
	// {"Text":"chips TPU of slices","Slice":"v6e-4 2x2"}
	// true serve: no deployment "llm" on this server (it has "model", "tokenizer") (status 404)
}

// A small model that needs one chip: each replica holds one chip of a
// host, and sees only it (TPU_VISIBLE_CHIPS).
type tinyModel struct{ chip string }

var (
	tinyModelClass = ray.NewActorClass("serve_example.tinyModel", func(ctx context.Context, _ struct{}) (*tinyModel, error) {
		rc, _ := ray.Runtime(ctx)
		return &tinyModel{chip: rc.Env("TPU_VISIBLE_CHIPS")}, nil
	})
	tinyModelChip = ray.NewMethod(tinyModelClass, "chip", func(ctx context.Context, m *tinyModel, _ struct{}) (string, error) {
		return m.chip, nil
	})
)

// Four replicas of one chip each share one v6e 2x2 host (4 chips), as
// Ray Serve replicas with ray_actor_options {"resources": {"TPU": 1}}.
func ExampleDeployment_chipsPerReplica() {
	ctx := context.Background()
	b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2", Count: 1}}}, nil)
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
		Name:        "tiny",
		Replica:     serve.Actor(tinyModelClass, struct{}{}, serve.Unary(tinyModelChip)),
		Accelerator: "v6e", Topology: "2x2", ChipsPerReplica: 1,
		MinReplicas: 4,
	})
	if err != nil {
		log.Fatal(err)
	}
	st, _ := srv.Status().Deployment("tiny")
	hosts := map[string]bool{}
	for _, r := range st.Replicas {
		hosts[r.Hosts[0]] = true
	}
	fmt.Println("ready:", st.Ready, "chips held:", st.ChipsHeld, "hosts:", len(hosts))
	// Output:
	// ready: 4 chips held: 4 hosts: 1
}
