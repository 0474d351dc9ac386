package serve_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// llmActor is the OpenAI test model: "model <id> says" and the words of
// the prompt (or of the last chat message), one token per chunk.
type llmActor struct{}

var (
	llmClass  = ray.NewActorClass("servetest.llm", func(ctx context.Context, _ struct{}) (*llmActor, error) { return &llmActor{}, nil })
	llmModels = serve.NewModels(llmClass, "models", serve.ModelLoader[*llmActor, string]{
		Load: func(ctx context.Context, _ *llmActor, id string) (string, error) {
			if id != "alpha" && id != "beta" {
				return "", serve.CodeError(ray.NotFound, "no weights for "+id)
			}
			return "model " + id, nil
		},
	})
	llmGenerate = serve.NewStream(llmClass, "generate", func(ctx context.Context, a *llmActor, req serve.GenerateRequest, send func(serve.Generated) error) error {
		name, err := llmModels.Get(ctx, a, req.MultiplexedModelID)
		if err != nil {
			return err
		}
		text := req.Prompt
		if req.Chat {
			text = req.Messages[len(req.Messages)-1].Content
		}
		words := append(strings.Fields(name+" says"), strings.Fields(text)...)
		max := len(words)
		if req.MaxTokens > 0 && req.MaxTokens < max {
			max = req.MaxTokens
		}
		for i, w := range words[:max] {
			g := serve.Generated{Text: w, PromptTokens: len(strings.Fields(text))}
			if i > 0 {
				g.Text = " " + w
			}
			if i == max-1 && max < len(words) {
				g.FinishReason = "length"
			}
			if err := send(g); err != nil {
				return err
			}
		}
		return nil
	})
)

// llmDeployment serves the models alpha and beta on two multiplexed CPU
// replicas (one model each at a time).
func llmDeployment() serve.Deployment {
	return serve.Deployment{
		Name:        "llm",
		Replica:     serve.Actor(llmClass, struct{}{}, serve.OpenAI(llmGenerate), serve.Multiplexed(llmModels)),
		Resources:   ray.Resources{ray.CPU: 1, "tok": 1},
		MinReplicas: 2, Idempotent: true,
		Multiplex: &serve.Multiplex{MaxModelsPerReplica: 1},
		Models:    []string{"alpha", "beta"},
	}
}

func postJSON(t testing.TB, client *http.Client, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// The OpenAI-compatible front: /v1/models lists what the deployments
// serve in OpenAI's list shape; chat completions and completions route by
// "model" to the actor or Process deployment serving it, streamed as
// chat.completion.chunk events ending in data: [DONE]; an unknown model
// is a 404 naming it, bad JSON a 400, both in OpenAI's error shape.
func TestOpenAIFront(t *testing.T) {
	c := newCPUCluster(t)
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	is := is.New(t)
	is.NoErr(srv.Deploy(context.Background(), llmDeployment()))
	exe, err := os.Executable()
	is.NoErr(err)
	is.NoErr(srv.Deploy(context.Background(), serve.Deployment{
		Name: "vllm",
		Replica: serve.Process(serve.ProcessSpec{
			Command: []string{exe, "-test.run=^$"}, StopTimeout: 5 * time.Second,
			Env: map[string]string{"SERVE_TEST_SERVER": "1", "SERVE_TEST_STATE": t.TempDir()},
		}),
		Resources: ray.Resources{ray.CPU: 0.5},
		Models:    []string{"gamma"},
	}))

	t.Run("models", func(t *testing.T) {
		is := is.New(t)
		resp, err := client.Get(base + "/v1/models")
		is.NoErr(err)
		defer resp.Body.Close()
		is.Equal(resp.StatusCode, 200)
		var list struct {
			Object string
			Data   []struct {
				ID, Object string
				Created    int64
				OwnedBy    string `json:"owned_by"`
			}
		}
		is.NoErr(json.NewDecoder(resp.Body).Decode(&list))
		is.Equal(list.Object, "list")
		var ids []string
		for _, m := range list.Data {
			ids = append(ids, m.ID)
			is.Equal(m.Object, "model")
			is.True(m.Created > 0)
			is.True(m.OwnedBy != "")
		}
		is.Equal(ids, []string{"alpha", "beta", "gamma"})
	})

	type chatAnswer struct {
		ID, Object, Model string
		Created           int64
		Choices           []struct {
			Index        int
			Message      struct{ Role, Content string }
			Text         string
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		}
	}
	t.Run("chat completion by model", func(t *testing.T) {
		is := is.New(t)
		hosts := map[string]string{}
		for _, model := range []string{"alpha", "beta", "alpha"} {
			resp, b := postJSON(t, client, base+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hello there"}]}],"temperature":0.2,"user":"x"}`, model))
			is.Equal(resp.StatusCode, 200)
			var a chatAnswer
			is.NoErr(json.Unmarshal(b, &a))
			is.Equal(a.Object, "chat.completion")
			is.True(strings.HasPrefix(a.ID, "chatcmpl-"))
			is.Equal(a.Model, model)
			is.Equal(len(a.Choices), 1)
			is.Equal(a.Choices[0].Message.Role, "assistant")
			is.Equal(a.Choices[0].Message.Content, "model "+model+" says hello there")
			is.Equal(a.Choices[0].FinishReason, "stop")
			is.Equal(a.Usage.CompletionTokens, 5)
			is.Equal(a.Usage.PromptTokens, 2)
			is.Equal(a.Usage.TotalTokens, 7)
			_ = hosts
		}
		// Each model stays on one replica (one model per replica).
		for _, models := range replicaModels(srv, "llm") {
			is.Equal(len(models), 1)
		}
	})

	t.Run("chat completion streamed", func(t *testing.T) {
		is := is.New(t)
		resp, err := client.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"beta","messages":[{"role":"user","content":"one two three"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":4}`))
		is.NoErr(err)
		defer resp.Body.Close()
		is.Equal(resp.StatusCode, 200)
		is.Equal(resp.Header.Get("Content-Type"), "text/event-stream")
		evs, err := readSSE(resp.Body)
		is.NoErr(err)
		is.Equal(evs[len(evs)-1].Data, "[DONE]")
		var text strings.Builder
		var finish []string
		var usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		}
		ids := map[string]bool{}
		for i, ev := range evs[:len(evs)-1] {
			var ch struct {
				ID, Object, Model string
				Choices           []struct {
					Delta        struct{ Role, Content string }
					FinishReason *string `json:"finish_reason"`
				}
				Usage *struct {
					CompletionTokens int `json:"completion_tokens"`
				}
			}
			is.NoErr(json.Unmarshal([]byte(ev.Data), &ch))
			is.Equal(ch.Object, "chat.completion.chunk")
			is.Equal(ch.Model, "beta")
			ids[ch.ID] = true
			if i == 0 {
				is.Equal(ch.Choices[0].Delta.Role, "assistant")
			}
			for _, c := range ch.Choices {
				text.WriteString(c.Delta.Content)
				if c.FinishReason != nil {
					finish = append(finish, *c.FinishReason)
				}
			}
			if ch.Usage != nil {
				usage = ch.Usage
				is.Equal(len(ch.Choices), 0) // the usage chunk has no choices
			}
		}
		is.Equal(len(ids), 1) // one ID for the whole stream
		is.Equal(text.String(), "model beta says one")
		is.Equal(finish, []string{"length"})
		is.True(usage != nil)
		is.Equal(usage.CompletionTokens, 4)
	})

	t.Run("completion, whole and streamed", func(t *testing.T) {
		is := is.New(t)
		resp, b := postJSON(t, client, base+"/v1/completions", `{"model":"alpha","prompt":"good morning","max_tokens":16}`)
		is.Equal(resp.StatusCode, 200)
		var a chatAnswer
		is.NoErr(json.Unmarshal(b, &a))
		is.Equal(a.Object, "text_completion")
		is.True(strings.HasPrefix(a.ID, "cmpl-"))
		is.Equal(a.Choices[0].Text, "model alpha says good morning")

		resp, b = postJSON(t, client, base+"/v1/completions", `{"model":"alpha","prompt":["good morning"],"stream":true}`)
		is.Equal(resp.StatusCode, 200)
		evs, err := readSSE(bytes.NewReader(b))
		is.NoErr(err)
		is.Equal(evs[len(evs)-1].Data, "[DONE]")
		var text strings.Builder
		for _, ev := range evs[:len(evs)-1] {
			var ch struct {
				Object  string
				Choices []struct{ Text string }
			}
			is.NoErr(json.Unmarshal([]byte(ev.Data), &ch))
			is.Equal(ch.Object, "text_completion")
			text.WriteString(ch.Choices[0].Text)
		}
		is.Equal(text.String(), "model alpha says good morning")
	})

	t.Run("a process deployment gets the request as it came", func(t *testing.T) {
		is := is.New(t)
		resp, b := postJSON(t, client, base+"/v1/chat/completions", `{"model":"gamma","messages":[{"role":"user","content":"hi"}]}`)
		is.Equal(resp.StatusCode, 200)
		var a chatAnswer
		is.NoErr(json.Unmarshal(b, &a))
		is.Equal(a.Choices[0].Message.Content, "process gamma (header gamma)")
		resp, b = postJSON(t, client, base+"/v1/chat/completions", `{"model":"gamma","messages":[{"role":"user","content":"hi"}],"stream":true}`)
		is.Equal(resp.StatusCode, 200)
		evs, err := readSSE(bytes.NewReader(b))
		is.NoErr(err)
		is.Equal(len(evs), 2)
		is.Equal(evs[1].Data, "[DONE]")
	})

	type openAIErr struct {
		Error struct {
			Message string
			Type    string
			Param   *string
			Code    *string
		}
	}
	errorOf := func(t *testing.T, status int, b []byte, want int) openAIErr {
		t.Helper()
		is := is.New(t)
		is.Equal(status, want)
		var e openAIErr
		is.NoErr(json.Unmarshal(b, &e))
		is.True(e.Error.Message != "")
		is.True(e.Error.Type != "")
		// The four keys are there, null or not.
		var raw map[string]map[string]json.RawMessage
		is.NoErr(json.Unmarshal(b, &raw))
		for _, k := range []string{"message", "type", "param", "code"} {
			_, ok := raw["error"][k]
			is.True(ok)
		}
		return e
	}
	t.Run("unknown model is a 404 naming it", func(t *testing.T) {
		is := is.New(t)
		for _, path := range []string{"/v1/chat/completions", "/v1/completions"} {
			resp, b := postJSON(t, client, base+path, `{"model":"gpt-nope","messages":[{"role":"user","content":"hi"}],"prompt":"x"}`)
			e := errorOf(t, resp.StatusCode, b, http.StatusNotFound)
			is.True(strings.Contains(e.Error.Message, `"gpt-nope"`))
			is.Equal(e.Error.Type, "invalid_request_error")
			is.Equal(*e.Error.Param, "model")
			is.Equal(*e.Error.Code, "model_not_found")
		}
	})
	t.Run("bad requests are 400s", func(t *testing.T) {
		is := is.New(t)
		for _, tc := range []struct{ body, param, says string }{
			{`{"model":`, "", "not a JSON"},
			{`{"messages":[]}`, "model", "model is required"},
			{`{"model":"alpha"}`, "messages", "messages is required"},
			{`{"model":"alpha","messages":[{"role":"user","content":"x"}],"n":2}`, "n", "one choice"},
			{`{"model":"alpha","messages":[{"role":"user","content":[{"type":"image_url"}]}]}`, "messages[0].content[0].type", "text parts only"},
		} {
			resp, b := postJSON(t, client, base+"/v1/chat/completions", tc.body)
			e := errorOf(t, resp.StatusCode, b, http.StatusBadRequest)
			is.True(strings.Contains(e.Error.Message, tc.says))
			if tc.param == "" {
				is.True(e.Error.Param == nil)
			} else {
				is.Equal(*e.Error.Param, tc.param)
			}
		}
		resp, b := postJSON(t, client, base+"/v1/completions", `{"model":"alpha","prompt":["a","b"]}`)
		e := errorOf(t, resp.StatusCode, b, http.StatusBadRequest)
		is.Equal(*e.Error.Param, "prompt")
		resp, err := client.Get(base + "/v1/chat/completions")
		is.NoErr(err)
		resp.Body.Close()
		is.Equal(resp.StatusCode, http.StatusMethodNotAllowed)
	})
	t.Run("a deployment named v1 keeps its routes", func(t *testing.T) {
		is := is.New(t)
		is.NoErr(srv.Deploy(context.Background(), serve.Deployment{Name: "v1", Replica: echoReplica("v1:"), Resources: ray.Resources{ray.CPU: 0.5}}))
		resp, b := postJSON(t, client, base+"/v1", `{"Text":"x"}`)
		is.Equal(resp.StatusCode, 200)
		is.True(strings.Contains(string(b), "v1:x"))
		resp, b = postJSON(t, client, base+"/v1/chat/completions", `{"model":"alpha","messages":[{"role":"user","content":"hi"}]}`)
		is.Equal(resp.StatusCode, http.StatusNotFound)
		is.True(strings.Contains(string(b), `deployment \"v1\" serves POST /v1`)) // the deployment's answer, not the front's
		is.NoErr(srv.Delete(context.Background(), "v1"))
		resp, _ = postJSON(t, client, base+"/v1/chat/completions", `{"model":"alpha","messages":[{"role":"user","content":"hi"}]}`)
		is.Equal(resp.StatusCode, 200)
	})
	t.Run("requests are counted", func(t *testing.T) {
		var buf bytes.Buffer
		srv.WriteMetrics(&buf)
		for _, want := range []string{
			`goray_serve_model_requests_total{deployment="llm",model="alpha"}`,
			`goray_serve_requests_total{code="200",deployment="llm"}`,
			`goray_serve_requests_total{code="200",deployment="vllm"}`,
		} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		st := dep(srv.Status(), "llm")
		var models []string
		for _, r := range st.Replicas {
			models = append(models, r.Models...)
		}
		slices.Sort(models)
		is.New(t).Equal(models, []string{"alpha", "beta"})
	})
}

// OpenAI's official Node.js client library (npm "openai", pinned and
// installed by scripts/openai-node.sh) lists the models, gets a chat
// completion, a streamed one and a completion, and an openai.NotFoundError
// for a model nobody serves, from a serve app on loopback
// (serve/testdata/openai-client.cjs). Skipped when node or npm is not on
// PATH.
func TestOpenAIClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err == nil {
		_, err = exec.LookPath("npm")
	}
	if err != nil {
		t.Skipf("skipped: node and npm are needed to run OpenAI's Node.js client library against the front: %v", err)
	}
	var stderr bytes.Buffer
	install := exec.Command("../scripts/openai-node.sh")
	install.Stderr = &stderr
	out, err := install.Output()
	if err != nil {
		t.Fatalf("scripts/openai-node.sh: %v\n%s", err, stderr.String())
	}
	prefix := strings.TrimSpace(string(out))

	c := newCPUCluster(t)
	srv := serve.New(c, nil)
	base, _ := startServer(t, srv)
	if err := srv.Deploy(context.Background(), llmDeployment()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "testdata/openai-client.cjs", base+"/v1")
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(prefix, "node_modules"))
	got, err := cmd.CombinedOutput()
	t.Logf("%s", got)
	if err != nil {
		t.Fatalf("the OpenAI client: %v", err)
	}
}
