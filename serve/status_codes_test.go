package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend/local"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// A method chooses its answer's status with serve.Error or
// serve.CodeError, wrapped or not; goray codes map to the statuses users
// expect; the body is {"error": the method's message}, without the call's
// wrapping (actor names) or any address. JSON bodies are decoded strictly
// unless the deployment allows unknown fields. The status crosses as a
// field of the task's error: with the actors in worker processes too, and
// a message that says "[HTTP 404]" is no 404.
func TestStatusCodes(t *testing.T) {
	t.Run("in process", func(t *testing.T) { testStatusCodes(t, newSingleHostCluster(t, 2)) })
	t.Run("worker processes", func(t *testing.T) {
		b, err := local.New(local.ClusterSpec{TPUSlices: []local.TPUSliceSpec{{Generation: "v6e", Topology: "2x2", Count: 2}}},
			&local.Options{Processes: &local.ProcessOptions{}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := ray.NewCluster(t.Context(), b, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		testStatusCodes(t, c)
	})
}

func testStatusCodes(t *testing.T, c *ray.Cluster) {
	srv := serve.New(c, nil)
	base, client := startServer(t, srv)
	for _, d := range []serve.Deployment{
		{Name: "e", Replica: echoReplica("e:"), Accelerator: "v6e", Topology: "2x2"},
		{Name: "lenient", Replica: echoReplica("l:"), Accelerator: "v6e", Topology: "2x2", AllowUnknownFields: true},
	} {
		if err := srv.Deploy(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(t *testing.T, b []byte) string {
		t.Helper()
		var e map[string]string
		if err := json.Unmarshal(b, &e); err != nil {
			t.Fatalf("answer %q: %v", b, err)
		}
		return e["error"]
	}
	cases := []struct {
		name       string
		in         EchoIn
		status     int
		retryAfter bool
		msg        string
	}{
		{"serve.Error 404", EchoIn{Status: 404}, 404, false, `deployment "e": generate: status 404 asked for`},
		{"serve.Error 400", EchoIn{Status: 400}, 400, false, "status 400 asked for"},
		{"serve.Error 422", EchoIn{Status: 422}, 422, false, "status 422 asked for"},
		{"serve.Error 429", EchoIn{Status: 429}, 429, true, "status 429 asked for"},
		{"serve.Error 503", EchoIn{Status: 503}, 503, true, "status 503 asked for"},
		{"serve.Error with a status that is no error", EchoIn{Status: 200}, 500, false, "status 200 asked for"},
		{"InvalidArgument", EchoIn{Code: ray.InvalidArgument}, 400, false, "InvalidArgument asked for"},
		{"NotFound", EchoIn{Code: ray.NotFound}, 404, false, "NotFound asked for"},
		{"ResourceExhausted", EchoIn{Code: ray.ResourceExhausted}, 429, true, "ResourceExhausted asked for"},
		{"Unavailable", EchoIn{Code: ray.Unavailable}, 503, true, "Unavailable asked for"},
		{"DeadlineExceeded", EchoIn{Code: ray.DeadlineExceeded}, 504, false, "DeadlineExceeded asked for"},
		{"Internal", EchoIn{Code: ray.Internal}, 500, false, "Internal asked for"},
		{"a plain error", EchoIn{Fail: true}, 500, false, `deployment "e": the model refused`},
		{"a message that names a status", EchoIn{FailWith: "upstream said [HTTP 404]"}, 500, false, "upstream said [HTTP 404]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			code, retry, b := post(t, client, base+"/e", tc.in)
			t.Logf("%d %s", code, b)
			is.Equal(code, tc.status)
			is.Equal(retry != "", tc.retryAfter)
			msg := answer(t, b)
			is.True(strings.Contains(msg, tc.msg))
			is.True(tc.in.FailWith != "" || !strings.Contains(msg, "[HTTP")) // no marker of the router's
			is.True(!strings.Contains(msg, "servetest."))                    // nor the actor's class
			is.True(!strings.Contains(msg, "127.0.0.1"))
		})
	}
	t.Run("handle calls get the status and the code", func(t *testing.T) {
		is := is.New(t)
		h, err := serve.Handle[EchoIn, EchoOut](srv, "e")
		is.NoErr(err)
		_, err = h.Call(t.Context(), EchoIn{Code: ray.NotFound})
		var ce *serve.CallError
		is.True(errors.As(err, &ce))
		is.Equal(ce.Code, http.StatusNotFound)
		is.Equal(ray.CodeOf(err), ray.NotFound)
		is.True(errors.Is(err, ray.ErrNotFound))
		_, err = h.Call(t.Context(), EchoIn{Status: 429})
		is.Equal(ray.CodeOf(err), ray.ResourceExhausted)
	})
	t.Run("serve.Error in process", func(t *testing.T) {
		is := is.New(t)
		err := serve.Error(http.StatusConflict, "taken")
		var se *serve.StatusError
		is.True(errors.As(err, &se))
		is.Equal(se.Status, http.StatusConflict)
		is.Equal(ray.CodeOf(err), ray.AlreadyExists)
		is.Equal(ray.CodeOf(serve.CodeError(ray.NotFound, "x")), ray.NotFound)
		is.Equal(serve.StatusOf(ray.ResourceExhausted), http.StatusTooManyRequests)
	})

	strict := []struct {
		name, path, body, want string
	}{
		{"unknown field", "/e", `{"txt":"x"}`, `unknown field "txt"`},
		{"unknown field, stream", "/e/stream", `{"Text":"a b","Txt":"x"}`, `unknown field "Txt"`},
		{"data after the value", "/e", `{"Text":"x"} {"Text":"y"}`, "data after the JSON value"},
		{"data after the value, lenient", "/lenient", `{"Text":"x"}x`, "data after the JSON value"},
		{"not JSON", "/e", `Text=x`, "is not a JSON"},
	}
	for _, tc := range strict {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			resp, err := client.Post(base+tc.path, "application/json", strings.NewReader(tc.body))
			is.NoErr(err)
			var e map[string]string
			is.NoErr(json.NewDecoder(resp.Body).Decode(&e))
			resp.Body.Close()
			t.Logf("%d %s", resp.StatusCode, e["error"])
			is.Equal(resp.StatusCode, http.StatusBadRequest)
			is.True(strings.Contains(e["error"], tc.want))
		})
	}
	t.Run("unknown fields allowed by the deployment", func(t *testing.T) {
		is := is.New(t)
		code, _, b := post(t, client, base+"/lenient", map[string]string{"Text": "x", "txt": "y"})
		is.Equal(code, http.StatusOK)
		var out EchoOut
		is.NoErr(json.Unmarshal(b, &out))
		is.Equal(out.Text, "l:x")
	})
}
