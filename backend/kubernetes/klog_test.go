package kubernetes

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/matryer/is"
	"k8s.io/klog/v2"
)

// client-go's klog lines (its throttling waits) reach Config.Logger at
// Debug, marked source=client-go, instead of stderr; errors at Warn.
func TestKlogRoutedToLogger(t *testing.T) {
	is := is.New(t)
	var buf bytes.Buffer
	cfg := testConfig()
	cfg.Client = newFakeClient()
	cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() { RouteKlog(nil) })
	_, err := New(t.Context(), cfg)
	is.NoErr(err)
	klog.Info("Waited before sending request due to client-side throttling")
	klog.Error("reflector failed")
	klog.Flush()
	out := buf.String()
	t.Log(out)
	is.True(strings.Contains(out, `level=DEBUG msg="Waited before sending request due to client-side throttling"`))
	is.True(strings.Contains(out, `source=client-go`))
	is.True(strings.Contains(out, `level=WARN msg="reflector failed"`))

	// At the default level (Info) the throttling line is not shown.
	buf.Reset()
	RouteKlog(slog.New(slog.NewTextHandler(&buf, nil)))
	klog.Info("Waited before sending request")
	klog.Flush()
	is.Equal(buf.String(), "")
}

// Creating a backend while client-go goroutines log (informers of an
// earlier backend, the program's own clients) is not a data race: klog's
// process-wide logger is set once, at init, and a backend only swaps
// where it forwards (go test -race reports the race otherwise).
func TestKlogRouteWhileLogging(t *testing.T) {
	is := is.New(t)
	t.Cleanup(func() { RouteKlog(nil) })
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				klog.Background().V(0).Info("Waited before sending request")
				klog.FromContext(t.Context()).Info("reflector started")
			}
		}
	}()
	for range 3 {
		cfg := testConfig()
		cfg.Client = newFakeClient()
		_, err := New(t.Context(), cfg)
		is.NoErr(err)
	}
	close(stop)
	<-done
}
