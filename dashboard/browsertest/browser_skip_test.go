//go:build !browser

package browsertest_test

import "testing"

// TestBrowser is in browser_test.go, behind the browser build tag, so that
// the default build does not compile chromedp.
func TestBrowser(t *testing.T) {
	t.Skip("the browser tests need headless Chromium and the browser build tag: scripts/install-chromium.sh && go test -tags browser ./dashboard/...")
}
