// Package browsertest holds the dashboard's tests in headless Chromium
// (through chromedp). It is a module of its own so that chromedp is not a
// requirement of the root module: users of goray never build it.
//
//	scripts/install-chromium.sh
//	cd dashboard/browsertest && go test -tags browser ./...
package browsertest
