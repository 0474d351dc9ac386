package layout

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/matryer/is"
)

// testSupport reports whether a package exists to help tests and may
// therefore import package testing: backend/backendtest,
// backend/cluster/clustertest, storage/storagetest, serve/promtest,
// internal/testkit.
func testSupport(importPath string) bool {
	last := path.Base(importPath)
	return strings.HasSuffix(last, "test") || last == "testkit"
}

// linkingTesting lists, in the output of
// `go list -f '{{.ImportPath}} {{join .Deps " "}}'`, the packages that are
// not test support (testSupport) but link package testing.
func linkingTesting(listed string) []string {
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(listed), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || testSupport(fields[0]) {
			continue
		}
		for _, dep := range fields[1:] {
			if dep == "testing" {
				bad = append(bad, fields[0])
				break
			}
		}
	}
	return bad
}

// listDeps runs `go list` over ./... of the module in dir and returns one
// line per package: its import path and its dependencies (not its tests').
func listDeps(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...")
	cmd.Dir = dir
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("go list in %s: %v\n%s", dir, err, ee.Stderr)
	}
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	return string(out)
}

// TestProductionDoesNotLinkTesting: no package of the root module but test
// support (backendtest, clustertest, storagetest, testkit) links package
// testing, so no program built on goray (the examples, cmd/goray, a user's
// server) carries it and its flags. backend/local once did, through
// clustertest's static node source. With GORAY_NESTED_MODULES=1 (.ci/run)
// the nested modules are checked too: their dependencies are large
// downloads.
func TestProductionDoesNotLinkTesting(t *testing.T) {
	is := is.New(t)
	root, err := moduleRoot()
	is.NoErr(err)
	dirs := []string{"."}
	if os.Getenv(nestedModulesEnv) == "1" {
		dirs = publishedModules(t, root)
	}
	mains := 0
	for _, dir := range dirs {
		listed := listDeps(t, filepath.Join(root, dir))
		mains += strings.Count(listed, "\n"+prefix+"/examples/")
		for _, p := range linkingTesting(listed) {
			t.Errorf("%s links package testing into the programs that import it: move what it uses out of test-support packages (*test, testkit) and out of _test.go-only helpers", p)
		}
	}
	is.True(mains >= 5) // listed the examples, programs of their own
}

// TestLinkingTesting checks the checker on made-up go list output.
func TestLinkingTesting(t *testing.T) {
	is := is.New(t)
	listed := `example.com/m/a fmt testing
example.com/m/b fmt
example.com/m/b/btest testing
example.com/m/internal/testkit testing
example.com/m/c example.com/m/b/btest fmt testing
example.com/m/testingish fmt testing/iotest
`
	is.Equal(linkingTesting(listed), []string{"example.com/m/a", "example.com/m/c"})
	is.Equal(len(linkingTesting("example.com/m/b fmt\n")), 0)
}
