// Command batch-inference runs batched inference over a JSON Lines file on
// an actor pool of TPU slices, on the local simulator, the Go form of a
// Ray Data map_batches job whose replicas each hold a v6e 2x2 slice:
//
//	read JSON Lines → tokenize (ray tasks) → infer (actor pool, one v6e 2x2
//	slice per replica, batches of 32) → write JSON Lines
//
// To write Parquet instead, import github.com/goray-dev/goray/data/parquet
// (a module of its own) and call parquet.Write where this calls
// data.WriteJSONL; Prediction's `parquet` tags name its columns.
//
// The "model" is a deterministic stand-in: a hashed bag-of-words scorer.
// Each replica loads it in its constructor, where it also reads the slice's
// TPU env (TPU_NAME, TPU_WORKER_ID) that its reservation gave it.
//
//	go run ./examples/batch-inference -generate 1000 -in /tmp/reviews.jsonl -out /tmp/scores.jsonl
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log"
	"math"
	"os"
	"strings"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/data"
	"github.com/goray-dev/goray/ray"
)

// Review is one input line.
type Review struct {
	ID   int    `json:"id"`
	Text string `json:"text"`
}

// Tokens is a tokenized review.
type Tokens struct {
	ID  int     `json:"id"`
	IDs []int32 `json:"ids"`
}

// Prediction is one output row.
type Prediction struct {
	ID     int     `json:"id" parquet:"id"`
	Label  string  `json:"label" parquet:"label"`
	Score  float64 `json:"score" parquet:"score"`
	Tokens int     `json:"tokens" parquet:"tokens"`
	// Slice is the TPU slice of the replica that scored the row.
	Slice string `json:"slice" parquet:"slice"`
}

// vocab is the tokenizer's vocabulary size.
const vocab = 1 << 12

// Tokenize lowercases a review, splits it into words and hashes each word
// to a token ID. It is registered so that it can run as ray tasks.
var Tokenize = data.NewMapFunc("batchinference.tokenize", func(_ context.Context, r Review) (Tokens, error) {
	if strings.TrimSpace(r.Text) == "" {
		return Tokens{}, fmt.Errorf("review %d has no text", r.ID)
	}
	return Tokens{ID: r.ID, IDs: tokenize(r.Text)}, nil
})

func tokenize(text string) []int32 {
	words := strings.Fields(strings.ToLower(text))
	ids := make([]int32, len(words))
	for i, w := range words {
		ids[i] = token(w)
	}
	return ids
}

func token(word string) int32 {
	h := fnv.New32a()
	io.WriteString(h, strings.Trim(word, ".,!?"))
	return int32(h.Sum32() % vocab)
}

// Model is a model replica: it holds a TPU slice (in a real job, it would
// load weights onto the slice's chips here).
type Model struct {
	weights []float64
	slice   string
}

// ModelConfig is the replica's constructor input.
type ModelConfig struct{ Seed uint32 }

// ModelClass is the replica actor.
var ModelClass = ray.NewActorClass("batchinference.model", func(ctx context.Context, cfg ModelConfig) (*Model, error) {
	rc, ok := ray.Runtime(ctx)
	if !ok || rc.Env("TPU_NAME") == "" {
		return nil, fmt.Errorf("model replica needs a TPU slice; got none")
	}
	return &Model{weights: weights(cfg.Seed), slice: rc.Env("TPU_NAME")}, nil
})

// weights is the stand-in model: a fixed pseudo-random weight per token.
func weights(seed uint32) []float64 {
	w := make([]float64, vocab)
	x := seed | 1
	for i := range w {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		w[i] = float64(int32(x%2001)-1000) / 1000
	}
	return w
}

// Score is the stand-in model's forward pass on one review.
func Score(w []float64, ids []int32) float64 {
	var s float64
	for _, id := range ids {
		s += w[id]
	}
	return 1 / (1 + math.Exp(-s/math.Sqrt(float64(len(ids)))))
}

// Label turns a score into a label.
func Label(score float64) string {
	if score >= 0.5 {
		return "positive"
	}
	return "negative"
}

// Infer scores a batch on a replica.
var Infer = data.NewBatchMethod(ModelClass, "infer", func(_ context.Context, m *Model, batch []Tokens) ([]Prediction, error) {
	out := make([]Prediction, len(batch))
	for i, t := range batch {
		s := Score(m.weights, t.IDs)
		out[i] = Prediction{ID: t.ID, Label: Label(s), Score: s, Tokens: len(t.IDs), Slice: m.slice}
	}
	return out, nil
})

// Seed is the stand-in model's seed.
const Seed = 42

// Pipeline is the job: in and out name the input and output files.
func Pipeline(c *ray.Cluster, in, out data.Files) func(ctx context.Context, opts ...data.Option) error {
	reviews := data.ReadJSONL[Review](in)
	tokens := data.Apply(reviews, Tokenize, data.OnTasks(c), data.Concurrency(4))
	preds := data.ApplyPool(tokens, data.Pool[*Model, ModelConfig]{
		Cluster: c, Class: ModelClass, Arg: ModelConfig{Seed: Seed},
		Min: 1, Max: 2,
		Slice: &ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "2x2"},
	}, Infer, data.BatchSize(32))
	return func(ctx context.Context, opts ...data.Option) error {
		return data.WriteJSONL(ctx, preds, out, opts...)
	}
}

// ClusterSpec is two v6e 2x2 slices (one 4-chip host each) and CPU nodes.
func ClusterSpec() local.ClusterSpec {
	return local.ClusterSpec{
		Nodes:     []local.NodeSpec{{Name: "cpu", Count: 2, Resources: local.Resources{ray.CPU: 8}}},
		TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2", Count: 2}},
	}
}

// Generate writes n reviews to w.
func Generate(w io.Writer, n int) error {
	words := []string{"great", "awful", "fine", "slow", "fast", "love", "hate", "battery", "screen", "price", "value", "broken", "works", "perfect", "meh"}
	enc := json.NewEncoder(w)
	x := uint32(7)
	for i := range n {
		k := 3 + i%9
		parts := make([]string, k)
		for j := range parts {
			x = x*1664525 + 1013904223
			parts[j] = words[(x>>8)%uint32(len(words))]
		}
		if err := enc.Encode(Review{ID: i, Text: strings.Join(parts, " ")}); err != nil {
			return err
		}
	}
	return nil
}

func main() {
	ray.Main() // serve as a worker when a backend launched this binary as one
	in := flag.String("in", "reviews.jsonl", "input JSON Lines file (a path, folder or glob)")
	out := flag.String("out", "scores.jsonl", "output JSON Lines file")
	gen := flag.Int("generate", 0, "first write this many generated reviews to -in")
	flag.Parse()
	if err := run(context.Background(), *in, *out, *gen); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, in, out string, gen int) error {
	if gen > 0 {
		f, err := os.Create(in)
		if err != nil {
			return err
		}
		if err := Generate(f, gen); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	b, err := local.New(ClusterSpec(), nil)
	if err != nil {
		return err
	}
	c, err := ray.NewCluster(ctx, b, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	var st data.Stats
	if err := Pipeline(c, data.LocalFiles(in), data.LocalFiles(out))(ctx, data.CollectStats(&st)); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, st)
	return nil
}
