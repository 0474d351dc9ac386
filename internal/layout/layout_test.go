package layout

import (
	"fmt"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/matryer/is"
)

// kubernetesImport reports whether an import path belongs to the Kubernetes
// client libraries, whose compilation dominates a cold build.
func kubernetesImport(path string) bool {
	return strings.HasPrefix(path, "k8s.io/") || strings.HasPrefix(path, "sigs.k8s.io/")
}

// builtWithoutE2E reports whether a file with build constraint expr (nil
// for none) is compiled by a plain `go build` or `go test` on this
// platform, without -tags e2e.
func builtWithoutE2E(expr constraint.Expr) bool {
	if expr == nil {
		return true
	}
	return expr.Eval(func(tag string) bool {
		return tag == runtime.GOOS || tag == runtime.GOARCH || tag == "unix" || tag == "gc" ||
			strings.HasPrefix(tag, "go1.")
	})
}

// TestKubernetesImportsNeedE2ETag keeps the README's test command fast: no
// Go file of the module that a plain `go test ./...` compiles may import
// k8s.io or sigs.k8s.io packages. Such files carry `//go:build e2e` and
// are compiled by `make e2e` (scripts/e2e.sh) and CI. The nested modules
// under tools/ are separate builds and are not checked.
func TestKubernetesImportsNeedE2ETag(t *testing.T) {
	is := is.New(t)
	root, err := moduleRoot()
	is.NoErr(err)
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); path != root && err == nil {
				return filepath.SkipDir // a nested module, such as tools/k8s
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		var expr constraint.Expr
		for _, group := range f.Comments {
			if group.Pos() >= f.Package {
				break
			}
			for _, c := range group.List {
				if constraint.IsGoBuild(c.Text) {
					if expr, err = constraint.Parse(c.Text); err != nil {
						return err
					}
				}
			}
		}
		if !builtWithoutE2E(expr) {
			return nil
		}
		checked++
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if kubernetesImport(p) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s imports %s but is built by plain `go test ./...`: add `//go:build e2e` so only `make e2e` compiles it", rel, p)
			}
		}
		return nil
	})
	is.NoErr(err)
	is.True(checked > 10) // walked the module, not an empty folder
}

func TestBuiltWithoutE2E(t *testing.T) {
	cases := []struct {
		name, line string
		want       bool
	}{
		{"no constraint", "", true},
		{"e2e", "//go:build e2e", false},
		{"not e2e", "//go:build !e2e", true},
		{"e2e and this OS", "//go:build e2e && " + runtime.GOOS, false},
		{"other tag", "//go:build wireinject", false},
		{"not other tag", "//go:build !wireinject", true},
		{"this OS", "//go:build " + runtime.GOOS, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			var expr constraint.Expr
			if tc.line != "" {
				var err error
				expr, err = constraint.Parse(tc.line)
				is.NoErr(err)
			}
			is.Equal(builtWithoutE2E(expr), tc.want)
		})
	}
}

// moduleRoot is the folder of the go.mod of module
// github.com/goray-dev/goray above the working directory.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/goray-dev/goray\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod of module github.com/goray-dev/goray in %s or above", wd)
		}
	}
}

// heavyModules are import-path prefixes whose compilation dominated a cold
// `go test ./...` (about 100 of its 290 CPU-seconds in December 2026):
// gocloud.dev/blob (with gRPC, protobuf and OpenTelemetry), parquet-go
// (with five compression codecs) and the Prometheus client. They live in
// nested modules (storage/gocloud, data/parquet) or were replaced
// (github.com/VictoriaMetrics/metrics in serve); the Kubernetes client
// builds only with -tags e2e.
var heavyModules = []string{
	"k8s.io/", "sigs.k8s.io/", "gocloud.dev", "github.com/parquet-go/",
	"github.com/prometheus/", "google.golang.org/grpc", "google.golang.org/protobuf",
	"go.opentelemetry.io/", "github.com/klauspost/compress", "github.com/andybalholm/brotli",
}

// TestDefaultBuildStaysLight keeps the README's test command under two
// minutes from empty caches: nothing that `go test ./...` compiles, tests
// and their dependencies included, may come from heavyModules. Use a
// nested module (see scripts/test-modules.sh) for an adapter that needs
// one.
func TestDefaultBuildStaysLight(t *testing.T) {
	is := is.New(t)
	if testing.Short() {
		t.Skip("runs go list over the module; skipped with -short")
	}
	root, err := moduleRoot()
	is.NoErr(err)
	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	is.NoErr(err)
	pkgs := strings.Fields(string(out))
	is.True(len(pkgs) > 100) // listed the module's dependencies
	for _, p := range pkgs {
		for _, heavy := range heavyModules {
			if strings.HasPrefix(p, heavy) {
				t.Errorf("go test ./... compiles %s (from %s): move the code that needs it into a nested module (like storage/gocloud or data/parquet), or behind -tags e2e", p, heavy)
				break
			}
		}
	}
}
