//go:build !e2e

package kubeharness

import "testing"

// TestEndToEnd stands in for the harness's tests, which are built only
// with -tags e2e, so that `go test -v ./...` says they were skipped.
func TestEndToEnd(t *testing.T) {
	t.Skip("end-to-end tests need -tags e2e: run make e2e (scripts/e2e.sh), see docs/harness.md")
}
