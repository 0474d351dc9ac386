// Command serve-llm serves a deterministic stand-in "LLM" over HTTP from
// replicas that each own a whole v6e 2x4 TPU slice (two 4-chip hosts) on
// the local simulator, with token streaming, autoscaling by slices and
// replacement of replicas whose host dies. It serves two models, "tiny"
// and "tiny-chat", multiplexed over its replicas (each keeps one loaded),
// behind the OpenAI-compatible front, so OpenAI's clients can talk to it.
//
//	go run ./examples/serve-llm -addr 127.0.0.1:8000
//	curl -s localhost:8000/llm -d '{"prompt": "hello", "max_tokens": 8}'
//	curl -sN localhost:8000/llm/stream -d '{"prompt": "hello", "max_tokens": 8}'
//	curl -s localhost:8000/v1/models
//	curl -s localhost:8000/v1/chat/completions -d '{"model": "tiny-chat", "messages": [{"role": "user", "content": "hello"}]}'
//	curl -sN localhost:8000/v1/completions -d '{"model": "tiny", "prompt": "hello", "stream": true}'
//	curl -s localhost:8000/-/status
//	curl -s localhost:8000/-/metrics | grep goray_serve
//
// The model's output depends only on the prompt and max_tokens, so a
// request is idempotent: a request whose replica dies is replayed on
// another replica, and a replayed stream skips the tokens the client
// already has.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// Request is a completion request.
type Request struct {
	Prompt    string `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
}

// Completion is a whole completion.
type Completion struct {
	Text   string `json:"text"`
	Tokens int    `json:"tokens"`
	// Replica is the slice that served the request.
	Replica string `json:"replica"`
}

// Token is one streamed token.
type Token struct {
	Index int    `json:"index"`
	Text  string `json:"text"`
}

// Config configures the model on every host.
type Config struct {
	// TokenTime is the simulated accelerator time per token.
	TokenTime time.Duration
}

// model is the stand-in LLM: one per host of a replica's slice. Host 0
// answers requests; the other hosts are its tensor-parallel workers (here
// they only check that they got the slice's env).
type model struct {
	cfg      Config
	slice    string
	workerID string
}

var vocab = strings.Fields("the a slice of chips runs on hosts joined by ICI while tokens stream out one by one to every client who asked and waits")

// Tokens returns the deterministic completion of req.
func Tokens(req Request) []string {
	h := fnv.New64a()
	h.Write([]byte(req.Prompt))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(req.MaxTokens)))
	out := make([]string, req.MaxTokens)
	for i := range out {
		out[i] = vocab[rng.IntN(len(vocab))]
	}
	return out
}

var (
	// LLM is the model's actor class.
	LLM = ray.NewActorClass("servellm.model", func(ctx context.Context, cfg Config) (*model, error) {
		rc, _ := ray.Runtime(ctx)
		m := &model{cfg: cfg, slice: rc.Env("TPU_NAME"), workerID: rc.Env("TPU_WORKER_ID")}
		if m.slice == "" || m.workerID == "" {
			return nil, errors.New("no TPU env: the model must run on a reserved slice")
		}
		return m, nil
	})
	// Generate returns a whole completion.
	Generate = ray.NewMethod(LLM, "generate", func(ctx context.Context, m *model, req Request) (Completion, error) {
		if err := validate(req); err != nil {
			return Completion{}, err
		}
		toks := Tokens(req)
		if err := m.compute(ctx, len(toks)); err != nil {
			return Completion{}, err
		}
		return Completion{Text: strings.Join(toks, " "), Tokens: len(toks), Replica: m.slice}, nil
	})
	// GenerateStream streams a completion token by token.
	GenerateStream = serve.NewStream(LLM, "generateStream", func(ctx context.Context, m *model, req Request, send func(Token) error) error {
		if err := validate(req); err != nil {
			return err
		}
		for i, t := range Tokens(req) {
			if err := m.compute(ctx, 1); err != nil {
				return err
			}
			if err := send(Token{Index: i, Text: t}); err != nil {
				return err
			}
		}
		return nil
	})
)

// Models are the model IDs the deployment serves, multiplexed over its
// replicas.
var Models = []string{"tiny", "tiny-chat"}

// weights stand in for one model's weights: here a salt that makes each
// model's tokens its own.
type weights struct{ salt string }

var (
	// Weights loads a model on a replica's host-0 actor, by ID.
	Weights = serve.NewModels(LLM, "weights", serve.ModelLoader[*model, *weights]{
		Load: func(ctx context.Context, m *model, id string) (*weights, error) {
			if !slices.Contains(Models, id) {
				return nil, serve.CodeError(ray.NotFound, fmt.Sprintf("no weights for model %q", id))
			}
			return &weights{salt: id + ":"}, m.compute(ctx, 5) // loading takes a while
		},
	})
	// GenerateOpenAI generates for the OpenAI front: chat (from the
	// messages) or completion (from the prompt), token by token.
	GenerateOpenAI = serve.NewStream(LLM, "generateOpenAI", func(ctx context.Context, m *model, req serve.GenerateRequest, send func(serve.Generated) error) error {
		w, err := Weights.Get(ctx, m, req.MultiplexedModelID)
		if err != nil {
			return err
		}
		prompt := req.Prompt
		if req.Chat {
			var parts []string
			for _, msg := range req.Messages {
				parts = append(parts, msg.Role+": "+msg.Content)
			}
			prompt = strings.Join(parts, "\n")
		}
		r := Request{Prompt: w.salt + prompt, MaxTokens: cmp.Or(req.MaxTokens, 16)}
		if err := validate(r); err != nil {
			return serve.Error(http.StatusBadRequest, err.Error())
		}
		toks := Tokens(r)
		for i, t := range toks {
			if err := m.compute(ctx, 1); err != nil {
				return err
			}
			g := serve.Generated{Text: " " + t, PromptTokens: len(strings.Fields(prompt))}
			if i == 0 {
				g.Text = t
			}
			if i == len(toks)-1 {
				g.FinishReason = "length" // the stand-in always fills max_tokens
			}
			if err := send(g); err != nil {
				return err
			}
		}
		return nil
	})
)

func validate(req Request) error {
	if req.MaxTokens < 1 || req.MaxTokens > 4096 {
		return fmt.Errorf("max_tokens %d: want 1 to 4096", req.MaxTokens)
	}
	return nil
}

// compute stands in for n decode steps on the accelerator.
func (m *model) compute(ctx context.Context, n int) error {
	if m.cfg.TokenTime <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(time.Duration(n) * m.cfg.TokenTime)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ClusterSpec is the simulated cluster: slices v6e 2x4 slices of two
// 4-chip hosts each.
func ClusterSpec(slices int) local.ClusterSpec {
	return local.ClusterSpec{
		Nodes:     []local.NodeSpec{{Name: "cpu", Count: 1, Resources: local.Resources{ray.CPU: 8}}},
		TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x4", ChipsPerHost: 4, Count: slices}},
	}
}

// Deployment is the LLM deployment: v6e 2x4 replicas, idempotent, scaled
// between min and max slices on the requests per replica. Its replicas
// serve the Models by multiplexing, one loaded at a time each, for the
// OpenAI front.
func Deployment(cfg Config, min, max int) serve.Deployment {
	return serve.Deployment{
		Name: "llm",
		Replica: serve.Actor(LLM, cfg, serve.Unary(Generate), serve.Streaming(GenerateStream),
			serve.OpenAI(GenerateOpenAI), serve.Multiplexed(Weights)),
		Models:      Models,
		Multiplex:   &serve.Multiplex{MaxModelsPerReplica: 1},
		Accelerator: "v6e", Topology: "2x4", ChipsPerVM: 4,
		MinReplicas: min, MaxReplicas: max,
		MaxConcurrentRequests: 8,
		Idempotent:            true,
		RequestTimeout:        30 * time.Second,
		Autoscaling:           &serve.Autoscaling{TargetOngoingRequests: 4, UpscaleDelay: time.Second, DownscaleDelay: 30 * time.Second},
		Health:                &serve.HealthCheck{Period: time.Second},
	}
}

func main() {
	ray.Main()
	addr := flag.String("addr", "127.0.0.1:8000", "listen address")
	slices := flag.Int("slices", 4, "v6e 2x4 slices in the simulated cluster")
	verbose := flag.Bool("v", false, "log replica events")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first Ctrl-C a second one ends the program at once, as
	// without a handler, instead of waiting for the drain.
	context.AfterFunc(ctx, stop)
	if err := run(ctx, os.Stdout, *addr, *slices, *verbose); err != nil {
		log.Fatal(err)
	}
}

// tryLines are the commands that call the server at base, one a line.
func tryLines(base string) string {
	const body = `'{"prompt": "hello", "max_tokens": 8}'`
	return "  curl -s " + base + "/llm -d " + body + "\n" +
		"  curl -sN " + base + "/llm/stream -d " + body + "\n" +
		"  curl -s " + base + "/v1/models\n" +
		"  curl -s " + base + `/v1/chat/completions -d '{"model": "tiny-chat", "messages": [{"role": "user", "content": "hello"}]}'` + "\n" +
		"  curl -sN " + base + `/v1/completions -d '{"model": "tiny", "prompt": "hello", "stream": true}'` + "\n" +
		"  curl -s " + base + "/-/status\n" +
		"  curl -s " + base + "/-/metrics | grep goray_serve\n"
}

// run serves until ctx ends (Ctrl-C), then drains: it says what it does
// on out, since draining in-flight requests can take a while.
func run(ctx context.Context, out io.Writer, addr string, slices int, verbose bool) error {
	b, err := local.New(ClusterSpec(slices), nil)
	if err != nil {
		return err
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	opts := &serve.Options{}
	if verbose {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	srv := serve.New(c, opts)
	if err := srv.Deploy(ctx, Deployment(Config{TokenTime: 20 * time.Millisecond}, 2, slices)); err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "serving llm on http://%s (POST /llm, POST /llm/stream, OpenAI's GET /v1/models, POST /v1/chat/completions and /v1/completions for models %s, GET /-/status, GET /-/metrics); try:\n%s", l.Addr(), strings.Join(Models, " and "), tryLines("http://"+l.Addr().String()))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		inflight := 0
		for _, d := range srv.Status().Deployments {
			inflight += d.Queued
			for _, r := range d.Replicas {
				inflight += r.Ongoing
			}
		}
		fmt.Fprintf(out, "shutting down: draining %d in-flight %s (up to 30s; press Ctrl-C again to stop at once)\n", inflight, map[bool]string{true: "request", false: "requests"}[inflight == 1])
	}
	t0 := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		return serr
	}
	fmt.Fprintf(out, "drained in %v; replicas stopped, slices released\n", time.Since(t0).Round(time.Millisecond))
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
