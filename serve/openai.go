package serve

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/goray-dev/goray/ray"
)

// The OpenAI-compatible front, as Ray Serve LLM's OpenAI app: GET
// /v1/models lists the model IDs the deployments serve (Deployment.Models),
// and POST /v1/chat/completions and POST /v1/completions go to the
// deployment that serves the request's "model": a Process replica's server
// (vLLM and the like) gets the request as it came, an actor replica
// generates text with its [OpenAI] endpoint and the front answers in
// OpenAI's objects, streamed as server-sent events with "stream": true.

// ChatMessage is one message of a chat completion request.
type ChatMessage struct {
	// Role is "system", "developer", "user", "assistant" or "tool".
	Role string `json:"role"`
	// Content is the message's text (the text parts of an array of
	// content parts, joined).
	Content string `json:"content"`
}

// GenerateRequest is what an actor's [OpenAI] endpoint generates from:
// the OpenAI request's fields that shape the text. A chat completion has
// Messages; a completion has Prompt.
type GenerateRequest struct {
	// MultiplexedModel holds the model ID too, on a multiplexed
	// deployment: pass it to [Models.Get].
	MultiplexedModel
	// Model is the request's "model".
	Model string
	// Chat is set for /v1/chat/completions.
	Chat     bool
	Messages []ChatMessage `json:",omitempty"`
	Prompt   string        `json:",omitempty"`
	// MaxTokens is max_completion_tokens (or max_tokens); 0 when the
	// request gave none.
	MaxTokens   int      `json:",omitempty"`
	Temperature *float64 `json:",omitempty"`
	TopP        *float64 `json:",omitempty"`
	Stop        []string `json:",omitempty"`
	Seed        *int64   `json:",omitempty"`
}

// Generated is one chunk of generated text.
type Generated struct {
	// Text is the chunk's text (a token, or more).
	Text string `json:",omitempty"`
	// Tokens is how many tokens Text holds; 0 counts a chunk with text as
	// one. The usage the front reports adds them up.
	Tokens int `json:",omitempty"`
	// PromptTokens, when set on any chunk, is the prompt's token count
	// for the usage the front reports.
	PromptTokens int `json:",omitempty"`
	// FinishReason, on the last chunk, is "stop" or "length"; "" means
	// "stop".
	FinishReason string `json:",omitempty"`
}

// OpenAI serves the OpenAI front's /v1/chat/completions and
// /v1/completions for the deployment's Models with s, a stream of
// [Generated] text from a [GenerateRequest]: the front builds OpenAI's
// objects from the chunks (one chat.completion.chunk or text_completion
// event per chunk with "stream": true, else one object with all the text).
func OpenAI[A any](s *Stream[A, GenerateRequest, Generated]) Endpoint[A] {
	return Endpoint[A]{func(e *actorEndpoints[A]) {
		e.openai = func(ctx context.Context, h *ray.ActorHandle[A], body []byte, emit func([]byte) error) error {
			in, err := decodeBody[GenerateRequest](ctx, body)
			if err != nil {
				return err
			}
			return runStreamCall(ctx, s, h, in, emit)
		}
	}}
}

func (a *actorReplicaInstance[A]) generate(ctx context.Context, body []byte, emit func([]byte) error) error {
	if a.eps.openai == nil {
		return errNoOpenAI
	}
	return a.eps.openai(ctx, a.hosts[0], body, emit)
}

var errNoOpenAI = errors.New("no serve.OpenAI endpoint")

// hasOpenAI reports whether an actor deployment has an OpenAI endpoint.
func (r *actorReplica[A, CI]) hasOpenAI() bool { return r.eps.openai != nil }

// openAIError writes OpenAI's error object with status code.
func openAIError(w http.ResponseWriter, code int, msg, param, errCode string) {
	w.Header().Set("Content-Type", "application/json")
	if code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(openAIErrorBody(code, msg, param, errCode))
}

type openAIErr struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func openAIErrorBody(code int, msg, param, errCode string) map[string]openAIErr {
	typ := "invalid_request_error"
	switch {
	case code == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case code >= 500:
		typ = "server_error"
	}
	e := openAIErr{Message: redactAddrs(msg), Type: typ}
	if param != "" {
		e.Param = &param
	}
	if errCode != "" {
		e.Code = &errCode
	}
	return map[string]openAIErr{"error": e}
}

// openAIModel is an entry of GET /v1/models.
type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// openAIRoutes adds the front's routes to mux. A deployment named "v1"
// keeps its routes: the front then answers none of them.
func (s *Server) openAIRoutes(mux *http.ServeMux) {
	v1 := func(h func(w http.ResponseWriter, r *http.Request)) func(w http.ResponseWriter, r *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			s.mu.RLock()
			_, shadowed := s.deployments["v1"]
			s.mu.RUnlock()
			if shadowed {
				s.serveDeployment(w, r, "v1", strings.TrimPrefix(r.URL.Path, "/v1"))
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("/v1/models", v1(s.listModels))
	mux.HandleFunc("/v1/chat/completions", v1(func(w http.ResponseWriter, r *http.Request) { s.serveOpenAI(w, r, true) }))
	mux.HandleFunc("/v1/completions", v1(func(w http.ResponseWriter, r *http.Request) { s.serveOpenAI(w, r, false) }))
}

// listModels answers GET /v1/models: OpenAI's list of model objects, one
// per model ID a deployment serves, sorted by ID.
func (s *Server) listModels(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		openAIError(w, http.StatusMethodNotAllowed, "use GET /v1/models", "", "")
		return
	}
	s.mu.RLock()
	data := []openAIModel{}
	for _, d := range s.deployments {
		if d.deleting {
			continue
		}
		for _, id := range d.spec.Models {
			data = append(data, openAIModel{ID: id, Object: "model", Created: d.created.Unix(), OwnedBy: "goray"})
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(data, func(a, b openAIModel) int { return strings.Compare(a.ID, b.ID) })
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// openAIRequest is the part of a chat completion or completion request
// the front reads. Other fields are accepted and ignored, as clients send
// many; a Process replica's server gets the body as it came.
type openAIRequest struct {
	Model               *string         `json:"model"`
	Messages            []openAIMessage `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	N                   *int            `json:"n"`
	Stop                json.RawMessage `json:"stop"`
	Seed                *int64          `json:"seed"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type openAIMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// openAIBadRequest is a 400 naming the request's field.
type openAIBadRequest struct{ param, msg string }

func (e openAIBadRequest) Error() string { return e.msg }

// stringOrStrings decodes a JSON string or array of strings ("stop",
// "prompt"); null or absent is none.
func stringOrStrings(raw json.RawMessage, param string) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, openAIBadRequest{param, fmt.Sprintf("%s must be a string or an array of strings", param)}
	}
	return many, nil
}

// messageText returns a message's content: a string, or the text of an
// array of content parts.
func messageText(raw json.RawMessage, i int) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", openAIBadRequest{fmt.Sprintf("messages[%d].content", i), fmt.Sprintf("messages[%d].content must be a string or an array of content parts", i)}
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" {
			return "", openAIBadRequest{fmt.Sprintf("messages[%d].content[%d].type", i, j), fmt.Sprintf("messages[%d].content[%d] is of type %q: this server takes text parts only", i, j, p.Type)}
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// generateRequest turns an OpenAI request into what an actor generates
// from, checking what the front supports.
func (o *openAIRequest) generateRequest(chat bool) (GenerateRequest, error) {
	g := GenerateRequest{Model: *o.Model, Chat: chat, Temperature: o.Temperature, TopP: o.TopP, Seed: o.Seed}
	if o.N != nil && *o.N != 1 {
		return g, openAIBadRequest{"n", fmt.Sprintf("n is %d: this server generates one choice (n 1)", *o.N)}
	}
	if o.MaxCompletionTokens != nil {
		g.MaxTokens = *o.MaxCompletionTokens
	} else if o.MaxTokens != nil {
		g.MaxTokens = *o.MaxTokens
	}
	if g.MaxTokens < 0 {
		return g, openAIBadRequest{"max_tokens", fmt.Sprintf("max_tokens %d is negative", g.MaxTokens)}
	}
	stop, err := stringOrStrings(o.Stop, "stop")
	if err != nil {
		return g, err
	}
	g.Stop = stop
	if chat {
		if len(o.Messages) == 0 {
			return g, openAIBadRequest{"messages", "messages is required: an array of at least one message"}
		}
		for i, m := range o.Messages {
			text, err := messageText(m.Content, i)
			if err != nil {
				return g, err
			}
			g.Messages = append(g.Messages, ChatMessage{Role: m.Role, Content: text})
		}
		return g, nil
	}
	prompts, err := stringOrStrings(o.Prompt, "prompt")
	if err != nil {
		return g, err
	}
	switch len(prompts) {
	case 0:
		return g, openAIBadRequest{"prompt", "prompt is required: a string"}
	case 1:
		g.Prompt = prompts[0]
	default:
		return g, openAIBadRequest{"prompt", fmt.Sprintf("prompt has %d strings: this server completes one prompt per request", len(prompts))}
	}
	return g, nil
}

// readOpenAIBody reads a request body whole (at most MaxBodyBytes, within
// BodyTimeout), holding it in the server's budget for bodies in memory; it
// answers the request itself when it returns false, else the caller calls
// release.
func (s *Server) readOpenAIBody(w http.ResponseWriter, r *http.Request) (data []byte, release func(), ok bool) {
	limit := s.opts.MaxBodyBytes
	if r.ContentLength > limit {
		openAIError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body of %d bytes is larger than the limit of %d", r.ContentLength, limit), "", "")
		return nil, nil, false
	}
	want := limit
	if r.ContentLength >= 0 {
		want = r.ContentLength
	}
	if !s.acquireBody(want) {
		openAIError(w, http.StatusServiceUnavailable, "the server holds as many request bodies as it may; retry later", "", "")
		return nil, nil, false
	}
	data, code, msg := s.readWithin(w, r, want)
	if code != 0 {
		openAIError(w, code, msg, "", "")
		return nil, nil, false
	}
	return data, sync.OnceFunc(func() { s.releaseBody(int64(len(data))) }), true
}

// modelDeployment returns the deployment serving model, counting the
// caller among its users (it calls d.users.Done), or answers the request
// with 404 (no deployment serves it) or 503.
func (s *Server) modelDeployment(w http.ResponseWriter, model string) (*deployment, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closing {
		openAIError(w, http.StatusServiceUnavailable, "server is shutting down", "", "")
		return nil, false
	}
	var served []string
	for _, d := range s.deployments {
		if !slices.Contains(d.spec.Models, model) {
			served = append(served, d.spec.Models...)
			continue
		}
		if d.deleting {
			openAIError(w, http.StatusServiceUnavailable, fmt.Sprintf("the deployment serving model %q is being deleted; retry later", model), "model", "")
			return nil, false
		}
		s.requests.Add(1)
		d.users.Add(1)
		return d, true
	}
	slices.Sort(served)
	openAIError(w, http.StatusNotFound, fmt.Sprintf("The model %q does not exist: this server serves %s (GET /v1/models lists them)", model, quoteList(served)), "model", "model_not_found")
	return nil, false
}

// serveOpenAI answers POST /v1/chat/completions (chat) and POST
// /v1/completions.
func (s *Server) serveOpenAI(w http.ResponseWriter, r *http.Request, chat bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		openAIError(w, http.StatusMethodNotAllowed, "use POST", "", "")
		return
	}
	start := time.Now()
	body, release, ok := s.readOpenAIBody(w, r)
	if !ok {
		return
	}
	defer release()
	var req openAIRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openAIError(w, http.StatusBadRequest, fmt.Sprintf("request body is not a JSON request object: %v", err), "", "")
		return
	}
	if req.Model == nil || *req.Model == "" {
		openAIError(w, http.StatusBadRequest, "model is required: one of the IDs GET /v1/models lists", "model", "")
		return
	}
	model := *req.Model
	if err := checkModelID(model); err != nil {
		openAIError(w, http.StatusBadRequest, err.Error(), "model", "")
		return
	}
	d, ok := s.modelDeployment(w, model)
	if !ok {
		return
	}
	defer s.requests.Done()
	defer d.users.Done()
	ctx := r.Context()
	if d.multiplexed() {
		ctx = withModel(ctx, model)
	}
	if _, isProcess := d.spec.Replica.(*processReplica); isProcess {
		// The replica's server speaks OpenAI: it gets the request as it
		// came, with the model in the multiplexing header.
		in := r.Clone(ctx)
		in.URL.Path, in.URL.RawPath = "/"+d.spec.Name+r.URL.Path, ""
		in.Body, in.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		in.TransferEncoding = nil
		in.Header.Set(ModelIDHeader, model)
		bs, ok := s.openBody(w, in, d, start)
		if !ok {
			return
		}
		pctx, cancel := bs.withTimeout(ctx, d.spec.RequestTimeout)
		defer cancel()
		d.proxy(pctx, w, in, bs, nil, start)
		return
	}
	gen, err := req.generateRequest(chat)
	if err != nil {
		var bad openAIBadRequest
		errors.As(err, &bad)
		openAIError(w, http.StatusBadRequest, bad.msg, bad.param, "")
		d.observe(http.StatusBadRequest, start)
		return
	}
	if oa, ok := d.spec.Replica.(interface{ hasOpenAI() bool }); !ok || !oa.hasOpenAI() {
		openAIError(w, http.StatusNotImplemented, fmt.Sprintf("deployment %q serves model %q but has no serve.OpenAI endpoint", d.spec.Name, model), "model", "")
		d.observe(http.StatusNotImplemented, start)
		return
	}
	genBody, _ := json.Marshal(gen)
	if d.overloaded() {
		openAIError(w, http.StatusServiceUnavailable, fmt.Sprintf("model %q: %v; retry later", model, ErrOverloaded), "", "")
		d.observe(http.StatusServiceUnavailable, start)
		return
	}
	timeout := d.spec.RequestTimeout
	if req.Stream {
		timeout *= 10
	}
	ctx, cancel := context.WithTimeout(d.decodeContext(ctx), timeout)
	defer cancel()
	o := &openAIAnswer{w: w, rc: http.NewResponseController(w), chat: chat, model: model, stream: req.Stream,
		usage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage, id: newCompletionID(chat), created: time.Now().Unix()}
	release() // the body is copied into genBody
	code, msg := d.attempt(ctx, func(rep *replica) error {
		ai, ok := rep.inst.(interface {
			generate(context.Context, []byte, func([]byte) error) error
		})
		if !ok {
			return badRequest{errNoOpenAI}
		}
		seen := 0
		return ai.generate(ctx, genBody, func(chunk []byte) error {
			seen++
			if seen <= o.chunks {
				return nil // the client has it from an earlier attempt
			}
			var g Generated
			if err := json.Unmarshal(chunk, &g); err != nil {
				return err
			}
			return o.add(g)
		})
	})
	o.finish(code, msg)
	d.observe(cmp.Or(code, http.StatusOK), start)
}

func newCompletionID(chat bool) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	if chat {
		return "chatcmpl-" + hex.EncodeToString(b[:])
	}
	return "cmpl-" + hex.EncodeToString(b[:])
}

// openAIAnswer builds one answer of the front from generated chunks.
type openAIAnswer struct {
	w                   http.ResponseWriter
	rc                  *http.ResponseController
	chat, stream, usage bool
	model, id           string
	created             int64
	chunks              int // chunks taken
	started             bool
	text                strings.Builder
	finish_             string
	promptTok, complTok int
}

func (o *openAIAnswer) object() string {
	switch {
	case o.chat && o.stream:
		return "chat.completion.chunk"
	case o.chat:
		return "chat.completion"
	}
	return "text_completion"
}

// add takes one generated chunk, writing it to a stream.
func (o *openAIAnswer) add(g Generated) error {
	o.chunks++
	if g.PromptTokens > 0 {
		o.promptTok = g.PromptTokens
	}
	if g.Tokens > 0 {
		o.complTok += g.Tokens
	} else if g.Text != "" {
		o.complTok++
	}
	if g.FinishReason != "" {
		o.finish_ = g.FinishReason
	}
	if !o.stream {
		o.text.WriteString(g.Text)
		return nil
	}
	if !o.started {
		o.started = true
		h := o.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		o.w.WriteHeader(http.StatusOK)
		if o.chat {
			// The first chunk says who speaks, as OpenAI's does.
			if err := o.event(o.choice(map[string]string{"role": "assistant", "content": ""}, "", nil)); err != nil {
				return err
			}
		}
	}
	if g.Text == "" {
		return nil
	}
	if o.chat {
		return o.event(o.choice(map[string]string{"content": g.Text}, "", nil))
	}
	return o.event(o.choice(nil, g.Text, nil))
}

// choice is one object of the answer with a single choice: a delta for a
// chat chunk, a message for a whole chat answer, text for a completion.
func (o *openAIAnswer) choice(delta map[string]string, text string, finish *string) map[string]any {
	c := map[string]any{"index": 0, "logprobs": nil, "finish_reason": finish}
	switch {
	case o.chat && o.stream:
		c["delta"] = delta
	case o.chat:
		c["message"] = map[string]any{"role": "assistant", "content": text, "refusal": nil}
	default:
		c["text"] = text
	}
	return map[string]any{"id": o.id, "object": o.object(), "created": o.created, "model": o.model, "choices": []any{c}}
}

func (o *openAIAnswer) usageObject() map[string]int {
	return map[string]int{"prompt_tokens": o.promptTok, "completion_tokens": o.complTok, "total_tokens": o.promptTok + o.complTok}
}

// event writes one server-sent event of v and flushes it.
func (o *openAIAnswer) event(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(o.w, "data: %s\n\n", data); err != nil {
		return err
	}
	return o.rc.Flush()
}

// finish ends the answer: the whole object, or a stream's last chunk (and
// usage) and "data: [DONE]"; with code set, the error (as OpenAI's error
// object, in an event once the stream began).
func (o *openAIAnswer) finish(code int, msg string) {
	if code != 0 && !o.started {
		openAIError(o.w, code, msg, "", "")
		return
	}
	if code != 0 {
		_ = o.event(openAIErrorBody(code, msg, "", ""))
		return
	}
	finish := cmp.Or(o.finish_, "stop")
	if !o.stream {
		obj := o.choice(nil, o.text.String(), &finish)
		obj["usage"] = o.usageObject()
		o.w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(o.w).Encode(obj)
		return
	}
	if !o.started {
		_ = o.add(Generated{}) // no text at all: the stream still begins
	}
	if o.chat {
		_ = o.event(o.choice(map[string]string{}, "", &finish))
	} else {
		_ = o.event(o.choice(nil, "", &finish))
	}
	if o.usage {
		obj := map[string]any{"id": o.id, "object": o.object(), "created": o.created, "model": o.model, "choices": []any{}, "usage": o.usageObject()}
		_ = o.event(obj)
	}
	_, _ = io.WriteString(o.w, "data: [DONE]\n\n")
	_ = o.rc.Flush()
}
