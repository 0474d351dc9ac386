//go:build e2e

package kubeharness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Pinned versions of the control-plane binaries. scripts/k8s-build.sh builds
// exactly these; binDirKey must match its KEY (TestBuildScriptKey checks it).
const (
	KubeVersion    = "v1.37.2"
	EtcdVersion    = "v3.7.3"
	KwokVersion    = "v0.8.0"
	CoreDNSVersion = "v1.15.0"

	binDirKey = "k8s-" + KubeVersion + "_etcd-" + EtcdVersion + "_kwok-" + KwokVersion + "_coredns-" + CoreDNSVersion
)

// Environment variables read by the harness.
const (
	// EnvE2E set to 1 runs the harness: Start then fails, instead of
	// skipping, when the binaries are missing. Unset, Start skips the test
	// at once. The package compiles only with -tags e2e; scripts/e2e.sh
	// sets both.
	EnvE2E = "GORAY_E2E"
	// EnvBinDir overrides the folder holding the binaries (the same
	// variable scripts/k8s-build.sh reads).
	EnvBinDir = "GORAY_K8S_BIN_DIR"
	// EnvKeep set to 1 keeps the run folder (logs, etcd data, certs) after
	// teardown and logs where it is.
	EnvKeep = "GORAY_K8S_KEEP"
)

// binaryNames are the files Start needs in the binary folder.
var binaryNames = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "coredns"}

// kwokNames are the extra files needed once a kwok node pool is added.
var kwokNames = []string{"kwok", "kwok-stages.yaml"}

const modulePath = "github.com/goray-dev/goray"

// DefaultBinDir returns the folder scripts/k8s-build.sh builds into when
// GORAY_K8S_BIN_DIR is unset: <repo>/.cache/k8s/<versions>/bin, where <repo>
// is found by walking up from the working directory (go test runs in the
// package folder) to the go.mod of module github.com/goray-dev/goray.
func DefaultBinDir() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "k8s", binDirKey, "bin"), nil
}

// BinDir returns GORAY_K8S_BIN_DIR if set, else DefaultBinDir.
func BinDir() (string, error) {
	if d := os.Getenv(EnvBinDir); d != "" {
		return filepath.Abs(d)
	}
	return DefaultBinDir()
}

func repoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && isRootModule(b) {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", fmt.Errorf("kubeharness: no go.mod of module %s above %v; set %s", modulePath, starts, EnvBinDir)
}

func isRootModule(gomod []byte) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "module" {
			return f[1] == modulePath
		}
	}
	return false
}

// missingBinaries lists the files of names that are not in dir.
func missingBinaries(dir string, names []string) []string {
	var missing []string
	for _, n := range names {
		st, err := os.Stat(filepath.Join(dir, n))
		if err != nil || st.IsDir() || st.Size() == 0 {
			missing = append(missing, n)
		}
	}
	return missing
}

// errSkip is returned by checkEnvironment when the caller asked for the fast
// path; the test is skipped, not failed.
var errSkip = errors.New("skip")

// checkEnvironment decides whether a control plane may start: it returns the
// binary folder, or errSkip with a message, or an error that fails the test.
func checkEnvironment(binDir string) (dir, msg string, err error) {
	required := os.Getenv(EnvE2E) == "1"
	if !required {
		return "", fmt.Sprintf("kubeharness: skipping Kubernetes control-plane test: set %s=1 to run it "+
			"(`make e2e` builds the binaries and does)", EnvE2E), errSkip
	}
	if testing.Short() {
		return "", "kubeharness: skipping Kubernetes control-plane test in -short mode", errSkip
	}
	dir = binDir
	if dir == "" {
		if dir, err = BinDir(); err != nil {
			return "", "", err
		}
	}
	if m := missingBinaries(dir, binaryNames); len(m) > 0 {
		return "", "", fmt.Errorf("kubeharness: %s=1 but %s missing in %s; build them with scripts/k8s-build.sh "+
			"(cold: ~12 min on 2 cores) or run `make e2e`", EnvE2E, strings.Join(m, ", "), dir)
	}
	return dir, "", nil
}
