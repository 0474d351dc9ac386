//go:build e2e

package kubeharness_test

import (
	"os"
	"testing"

	"github.com/goray-dev/goray/internal/kubeharness"
)

func TestMain(m *testing.M) {
	// Pods of image kubeharness.ImageTestProgram run this binary.
	kubeharness.RunTestProgram()
	os.Exit(m.Run())
}
