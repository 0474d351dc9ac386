//go:build browser

package browsertest_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/matryer/is"

	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/train"
)

// hold runs until its context ends or release is closed; with TPU chips it
// makes its host's chips busy outside any reservation. A test makes
// release before it submits hold.
var (
	release chan struct{}
	hold    = ray.NewTask("browsertest.hold", func(ctx context.Context, _ struct{}) (struct{}, error) {
		select {
		case <-ctx.Done():
		case <-release:
		}
		return struct{}{}, nil
	})
)

// TestBrowserLiveDriver is the page as `goray dashboard --driver` shows a
// running program: a driver serves its status endpoint with a token, the
// proxy (dashboard.Client.ServeProxy) serves it on loopback, and headless
// Chromium follows it: tasks running with their counts, TPU chips busy
// outside any reservation, a reservation waiting for a slice (and for how
// long), a train run's profiler addresses, and, once the driver has gone,
// the page saying so. It saves the full page to $GORAY_LIVE_SCREENSHOT
// when set (docs/dashboard-live.png).
func TestBrowserLiveDriver(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	d, err := dashboard.New(c, &dashboard.Options{Interval: 20 * time.Millisecond, Token: "s3cret"})
	is.NoErr(err)
	run := dashboard.NewTrainRun("pretrain")
	for i := range 30 {
		run.OnReport(train.Report{Attempt: 0, Iteration: i + 1, Metrics: train.Metrics{"loss": 3 / float64(i+2)},
			Slices: []string{"v6e-16-1"}, Profilers: []string{"127.0.0.1:9400", "127.0.0.1:9401", "127.0.0.1:9402", "127.0.0.1:9403"}})
	}
	d.TrackRun(run)
	driverLn, err := dashboard.Listen("127.0.0.1:0")
	is.NoErr(err)
	driverCtx, stopDriver := context.WithCancel(context.Background())
	driverDone := make(chan error, 1)
	go func() { driverDone <- d.Serve(driverCtx, driverLn) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopDriver()
			is.NoErr(<-driverDone)
		}
	}
	t.Cleanup(stop)

	client := &dashboard.Client{Addr: driverLn.Addr().String(), Token: "s3cret"}
	proxyLn, err := dashboard.Listen("127.0.0.1:0")
	is.NoErr(err)
	proxyCtx, stopProxy := context.WithCancel(context.Background())
	proxyDone := make(chan error, 1)
	go func() { proxyDone <- client.ServeProxy(proxyCtx, proxyLn) }()
	t.Cleanup(func() { stopProxy(); is.NoErr(<-proxyDone) })

	// A program: a reservation of the only v5p slice with a second one
	// waiting, and tasks holding CPU and all the chips of one v6e host.
	opCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := ray.NewSlicePlacementGroup(opCtx, c, ray.SliceSpec{AcceleratorVersion: "v5p", Topology: "2x2x2", Name: "trainer"})
	is.NoErr(err)
	defer first.Release(context.Background())
	release = make(chan struct{})
	var refs []ray.ObjectRef[struct{}]
	for range 3 {
		refs = append(refs, hold.Remote(opCtx, c, struct{}{}, ray.Resources{"CPU": 1}))
	}
	refs = append(refs, hold.Remote(opCtx, c, struct{}{}, ray.Resources{"TPU": 4}))
	defer func() {
		close(release)
		for _, r := range refs {
			r.Get(opCtx) //nolint:errcheck // released
		}
	}()
	waitCtx, stopWaiting := context.WithCancel(opCtx)
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		ray.NewSlicePlacementGroup(waitCtx, c, ray.SliceSpec{AcceleratorVersion: "v5p", Topology: "2x2x2", Name: "eval"}) //nolint:errcheck // cancelled
	}()
	defer func() { stopWaiting(); <-waited }()

	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+proxyLn.Addr().String()+"/")); err != nil {
		t.Fatal(err)
	}
	t.Run("the program's tasks run, with their counts", func(t *testing.T) {
		is := is.New(t)
		row := `document.querySelector('#tasks tr[data-task="browsertest.hold"]')`
		cells := poll[[]string](t, ctx, "4 tasks running", row+` && `+row+`.cells[1].textContent === "4" && [...`+row+`.cells].map((c) => c.textContent)`)
		is.Equal(cells, []string{"browsertest.hold", "4", "0", "4", "0", "0"}) // running, queued, submitted, finished, failed
	})
	t.Run("chips busy outside a reservation show busy", func(t *testing.T) {
		is := is.New(t)
		busy := poll[int](t, ctx, "4 busy chips", `document.querySelectorAll('.chip[data-state="busy"]').length === 4 && 4`)
		is.Equal(busy, 4)
	})
	t.Run("a reservation waiting for a slice shows, with how long", func(t *testing.T) {
		is := is.New(t)
		row := `document.querySelector('#pending tr[data-pending="eval"]')`
		text := poll[string](t, ctx, "the waiting reservation", row+` && `+row+`.textContent`)
		is.True(strings.Contains(text, "v5p 2x2x2"))
		is.True(strings.HasSuffix(eval[string](t, ctx, row+`.querySelector('.waited').textContent`), " s"))
		is.Equal(eval[string](t, ctx, sliceState("v5p-16-0")), "reserved")
	})
	t.Run("the train run lists its profilers", func(t *testing.T) {
		is := is.New(t)
		text := poll[string](t, ctx, "the profilers", `(document.querySelector('[data-run="pretrain"] .profilers') || {}).textContent`)
		is.True(strings.Contains(text, "rank 3 127.0.0.1:9403"))
	})
	full, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	is.NoErr(err)
	dir := os.Getenv("GORAY_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	is.NoErr(os.MkdirAll(dir, 0o755))
	is.NoErr(os.WriteFile(filepath.Join(dir, "live.png"), full, 0o644))
	if out := os.Getenv("GORAY_LIVE_SCREENSHOT"); out != "" {
		is.NoErr(os.WriteFile(out, full, 0o644))
	}

	t.Run("a driver that has gone is reported gone", func(t *testing.T) {
		is := is.New(t)
		stop()
		text := poll[string](t, ctx, "the problem", `(document.querySelector('#problems .problem') || {}).textContent`)
		is.True(strings.Contains(text, "the driver at "+client.Addr+" is gone"))
	})
}
