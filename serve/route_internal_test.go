package serve

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/matryer/is"
)

// deploymentPath takes a request only where the ingress's mux would give
// it to a deployment, with the same name and rest of the path.
func TestDeploymentPathAsServeMux(t *testing.T) {
	type route struct {
		name, rest string
		ok         bool
	}
	var got route
	mux := (&Server{}).routeMux(func(_ http.ResponseWriter, _ *http.Request, name, rest string) {
		got = route{name, rest, true}
	})
	taken := 0
	for _, target := range []string{
		"/proc", "/proc/", "/proc/where", "/proc/a/b/c", "/proc/a/b/", "/my-app_2.v~1/x.y/z",
		"/proc/where?q=1&r=%2F", "/proc/.hidden", "/proc/a..b", "/proc/...", "/.proc/x", "/..proc",
		"/proc/a%2Fb", "/pr%6Fc/x", "/proc/a%20b", "/proc/a+b", "/proc/@x", "/proc/a:b",
		"/proc//x", "/proc/./x", "/proc/../x", "/proc/x/.", "/proc/x/..", "/./proc", "/../proc", "//proc",
		"/-", "/-/healthz", "/-/status", "/v1", "/v1/models", "/v1/chat/completions", "/v1/other",
		"/", "*", "/proc/é",
	} {
		for _, method := range []string{"GET", "POST", "CONNECT", "OPTIONS"} {
			is := is.New(t)
			r := httptest.NewRequest(method, "http://router"+target, nil)
			if target == "*" {
				r = httptest.NewRequest(method, "*", nil)
			}
			name, rest, ok := deploymentPath(r)
			if !ok {
				continue // the mux decides, as before
			}
			taken++
			got = route{}
			mux.ServeHTTP(httptest.NewRecorder(), r)
			is.Equal(got, route{name, rest, true}) // the mux routes it to the same deployment and rest
		}
	}
	if taken < 20 {
		t.Fatalf("deploymentPath took %d requests; the test compares too few", taken)
	}
}
