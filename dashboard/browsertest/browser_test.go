//go:build browser

package browsertest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
	"github.com/goray-dev/goray/dashboard"
	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/tpu"
	"github.com/goray-dev/goray/train"
)

// browserFlags are the flags headless Chromium needs on a machine without
// network access: without them it waits on network services and hangs.
func browserFlags(t *testing.T, path string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000),
	}
}

// browser starts headless Chromium (CHROMIUM names its binary; by default
// chromium on PATH) and returns a tab's context. A browser that crashes
// while starting is started once more (CI saw Debian's chromium die at
// start-up once, with a crashpad report and no output of its own); the
// first failure is logged.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		var err error
		if path, err = exec.LookPath("chromium"); err != nil {
			t.Fatalf("chromium is not installed (run scripts/install-chromium.sh, or set CHROMIUM): %v", err)
		}
	}
	var err error
	for attempt := range 2 {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), browserFlags(t, path)...)
		ctx, cancel := chromedp.NewContext(actx)
		if err = chromedp.Do(ctx); err != nil { // start the browser without a deadline on its context
			cancel()
			cancelAlloc()
			if attempt == 0 {
				t.Logf("start chromium (trying once more): %v", err)
			}
			continue
		}
		t.Cleanup(func() {
			if err := chromedp.Cancel(ctx); err != nil {
				t.Logf("stop chromium: %v", err)
			}
			cancel()
			cancelAlloc()
		})
		return ctx
	}
	t.Fatalf("start chromium: %v", err)
	return nil
}

// poll waits until the JavaScript expression is truthy and returns it.
func poll[T any](t *testing.T, ctx context.Context, what, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Poll[T](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
	return v
}

func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves a PNG of the element sel to dir, and returns its path.
func screenshot(t *testing.T, ctx context.Context, dir, name, sel string) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("screenshot %s: %v", sel, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return path
}

// chipsIn is a JavaScript expression counting the chips of slice name in
// state.
func chipsIn(name, state string) string {
	return fmt.Sprintf(`document.querySelectorAll('[data-slice=%q] .chip[data-state=%q]').length`, name, state)
}

func sliceState(name string) string {
	return fmt.Sprintf(`(document.querySelector('[data-slice=%q]') || {dataset: {}}).dataset.state`, name)
}

// TestBrowser loads the dashboard of a live simulator in headless Chromium
// and checks that a reservation, a killed host, a sub-slice reservation
// and a release show on the page. It saves screenshots to a temp dir, or
// to $GORAY_SCREENSHOT_DIR when set, and the slices panel to
// $GORAY_DASHBOARD_SCREENSHOT when set (docs/dashboard.png, for the
// README).
func TestBrowser(t *testing.T) {
	is := is.New(t)
	c := cluster(t)
	d, err := dashboard.New(c, &dashboard.Options{Interval: 20 * time.Millisecond})
	is.NoErr(err)
	run := dashboard.NewTrainRun("pretrain")
	for i := range 40 {
		run.OnReport(train.Report{Attempt: 0, Iteration: i + 1, Metrics: train.Metrics{"loss": 3 / float64(i+2)}, Checkpoint: i%10 == 9})
	}
	d.TrackRun(run)
	ln, err := dashboard.Listen("127.0.0.1:0")
	is.NoErr(err)
	srvCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.Serve(srvCtx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})

	ctx := browser(t)
	shots := os.Getenv("GORAY_SCREENSHOT_DIR") // CI may keep them as artifacts
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+ln.Addr().String()+"/")); err != nil {
		t.Fatal(err)
	}
	poll[int](t, ctx, "the first view", chipsIn("v6e-16-0", "free"))
	is.Equal(eval[string](t, ctx, sliceState("v6e-16-0")), "free")
	is.Equal(eval[int](t, ctx, chipsIn("v6e-16-0", "free")), 16)
	is.Equal(eval[int](t, ctx, `document.querySelectorAll('.slice').length`), 4)

	opCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	spg, err := ray.NewSlicePlacementGroup(opCtx, c, ray.SliceSpec{AcceleratorVersion: "v6e", Topology: "4x4", Name: "trainer"})
	is.NoErr(err)
	reserved := spg.SliceNames()[0]
	sub, err := c.Backend().(backend.SliceReserver).ReserveSlices(opCtx, &backend.SliceRequest{Shape: tpu.SliceShape{Generation: tpu.V6e, Topology: tpu.MustParseTopology("8x8")}, Subslice: "4x4", Name: "small"})
	is.NoErr(err)
	is.NoErr(c.Backend().(backend.FaultInjector).KillNode(opCtx, "v5p-16-0-w1"))

	t.Run("a reserved slice shows as reserved, by its reservation", func(t *testing.T) {
		is := is.New(t)
		is.Equal(poll[int](t, ctx, "16 reserved chips", chipsIn(reserved, "reserved")+` === 16 && 16`), 16)
		is.Equal(eval[string](t, ctx, sliceState(reserved)), "reserved")
		is.Equal(eval[string](t, ctx, fmt.Sprintf(`document.querySelector('[data-slice=%q] .state').textContent`, reserved)), "reserved by trainer")
		is.Equal(eval[string](t, ctx, sliceState(other(reserved))), "free")
	})
	t.Run("a killed host shows as dead", func(t *testing.T) {
		is := is.New(t)
		is.Equal(poll[int](t, ctx, "4 dead chips", chipsIn("v5p-16-0", "dead")+` === 4 && 4`), 4)
		is.Equal(eval[string](t, ctx, sliceState("v5p-16-0")), "broken")
		is.Equal(eval[int](t, ctx, chipsIn("v5p-16-0", "free")), 4)
		is.Equal(eval[string](t, ctx, `document.querySelector('[data-slice="v5p-16-0"] .state').textContent`), "broken: dead host v5p-16-0-w1")
		is.Equal(eval[string](t, ctx, `document.querySelector('tr[data-node="v5p-16-0-w1"]').className`), "dead-row")
	})
	t.Run("a reserved sub-slice shows inside its slice", func(t *testing.T) {
		is := is.New(t)
		is.Equal(poll[int](t, ctx, "16 reserved chips of the 8x8", chipsIn("v6e-64-0", "reserved")+` === 16 && 16`), 16)
		is.Equal(eval[string](t, ctx, sliceState("v6e-64-0")), "partial")
		is.Equal(eval[string](t, ctx, fmt.Sprintf(`document.querySelector('[data-group="%d"] b').textContent`, sub.Group)), "small")
	})
	t.Run("a node's worker output shows in its row, as text", func(t *testing.T) {
		is := is.New(t)
		out := `document.querySelector('tr[data-node="cpu"] details.output')`
		is.Equal(poll[string](t, ctx, "the output's summary", out+` && `+out+`.querySelector('summary').textContent`), "1 line of output")
		is.Equal(eval[string](t, ctx, out+`.querySelector('pre').textContent`), outputLine)
		is.Equal(eval[int](t, ctx, out+`.querySelectorAll('b').length`), 0) // escaped, not markup
	})
	t.Run("a failed task's error shows under recent failures", func(t *testing.T) {
		is := is.New(t)
		_, err := failing.Remote(opCtx, c, "tokenizer shard 3 is corrupt", ray.Name("preprocess")).Get(opCtx)
		is.Equal(ray.CodeOf(err), ray.TaskFailed)
		row := `document.querySelector('#failures tr.failure[data-task="preprocess"]')`
		text := poll[string](t, ctx, "the failure's row", row+` && `+row+`.textContent`)
		is.True(strings.Contains(text, "TaskFailed"))
		is.True(strings.Contains(text, "tokenizer shard 3 is corrupt"))
		is.Equal(eval[string](t, ctx, row+`.cells[2].textContent`), "0")  // attempt
		is.True(eval[string](t, ctx, row+`.cells[3].textContent`) != "—") // the node it ran on
		screenshot(t, ctx, shots, "work.png", "#work")
	})
	t.Run("the train run draws its metrics", func(t *testing.T) {
		is := is.New(t)
		is.Equal(eval[int](t, ctx, `document.querySelectorAll('[data-run="pretrain"] svg path').length`), 1)
		// The loss on a log scale, with labelled axes of a readable size.
		label := eval[string](t, ctx, `document.querySelector('[data-run="pretrain"] svg').getAttribute('aria-label')`)
		is.Equal(label, "loss over iterations, log scale")
		is.True(eval[int](t, ctx, `document.querySelectorAll('[data-run="pretrain"] svg .ytick').length`) >= 2)
		is.Equal(eval[int](t, ctx, `document.querySelectorAll('[data-run="pretrain"] svg .xtick').length`), 5)
		is.True(eval[int](t, ctx, `document.querySelector('[data-run="pretrain"] svg').getBoundingClientRect().width`) >= 500)
	})
	t.Run("nodes sort as people read them, reservations in distinct colours", func(t *testing.T) {
		is := is.New(t)
		names := eval[[]string](t, ctx, `[...document.querySelectorAll('#nodes tr[data-node]')].map((r) => r.dataset.node)`)
		i2, i10 := slices.Index(names, "v6e-64-0-w2"), slices.Index(names, "v6e-64-0-w10")
		is.True(i2 >= 0 && i10 >= 0 && i2 < i10) // w2 before w10
		colours := eval[[]string](t, ctx, `[...document.querySelectorAll('#reservations .swatch')].map((e) => getComputedStyle(e).backgroundColor)`)
		is.Equal(len(colours), 2)
		is.True(colours[0] != colours[1])
	})
	screenshot(t, ctx, shots, "slices.png", "#slices")
	full, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	is.NoErr(err)
	is.NoErr(os.WriteFile(filepath.Join(shots, "page.png"), full, 0o644))
	if out := os.Getenv("GORAY_DASHBOARD_SCREENSHOT"); out != "" {
		screenshot(t, ctx, filepath.Dir(out), filepath.Base(out), "#slices")
	}

	t.Run("released slices show as free", func(t *testing.T) {
		is := is.New(t)
		is.NoErr(spg.Release(opCtx))
		is.NoErr(c.Backend().RemovePlacementGroup(opCtx, sub.Group))
		is.Equal(poll[string](t, ctx, "the release", sliceState(reserved)+` === "free" && "free"`), "free")
		poll[bool](t, ctx, "the sub-slice's release", sliceState("v6e-64-0")+` === "free"`)
		is.Equal(eval[int](t, ctx, `document.querySelectorAll('[data-group]').length`), 0) // no reservations listed
	})
	screenshot(t, ctx, shots, "released.png", "#slices")
}
