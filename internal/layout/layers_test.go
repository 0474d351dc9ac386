package layout

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/matryer/is"
)

// A layerRule says which of goray's packages the packages at pkg may
// import (their production code; tests may import more). Paths are
// relative to the module path github.com/goray-dev/goray; "x/..." matches
// x and every package below it, and the most specific rule of a package
// applies. never lists other modules' packages it must not import.
type layerRule struct {
	pkg   string
	may   []string
	never []string
}

// The arrows of DESIGN.md's "Layers and dependency direction": tpu at the
// bottom; backend above it; the runtime (backend/cluster), the fake and
// worker above backend; the backends above those; ray above backend (and
// worker: every binary can become a worker); train, serve and data above
// ray, never importing a backend; test support above what it tests; the
// dashboard, the CLI and the examples on top. Every package must match a
// rule, so a new package is placed on purpose.
var layerRules = []layerRule{
	{pkg: "tpu"},
	{pkg: "internal/natsort"},
	{pkg: "internal/rawio"}, // socket I/O below the runtime's net.Conn: a leaf
	{pkg: "storage", may: []string{"backend", "tpu"}}, // backend for its error codes
	{pkg: "backend", may: []string{"tpu"}},
	{pkg: "internal/admission", may: []string{"backend", "tpu"}},
	{pkg: "backend/cluster", may: []string{"backend", "tpu", "internal/admission"}},
	{pkg: "backend/fake", may: []string{"backend", "tpu", "internal/admission"}},
	{pkg: "worker", may: []string{"backend", "tpu", "internal/rawio"}},
	{pkg: "backend/local", may: []string{"backend", "tpu", "internal/admission", "backend/cluster", "worker"}},
	{pkg: "backend/kubernetes", may: []string{"backend", "tpu", "internal/admission", "backend/cluster", "worker"}},
	{pkg: "backend/kubernetes/deploy"}, // its manifests, embedded
	{pkg: "backend/kubernetes/examples/...", may: []string{"backend/...", "tpu", "ray/...", "worker"}},
	// ray is the portable API: no backend, no dependency-injection tool.
	{pkg: "ray", may: []string{"backend", "tpu", "worker"}, never: []string{"github.com/google/wire"}},
	{pkg: "ray/raywire", may: []string{"backend", "tpu", "ray"}},
	// The libraries: ray, tpu, storage, backend for what ray does not
	// re-export; serve reads worker's type keys and host; train reads
	// datasets. None imports a backend.
	{pkg: "storage/gocloud", may: []string{"backend", "tpu", "storage"}},
	{pkg: "data", may: []string{"backend", "tpu", "ray", "storage"}},
	{pkg: "data/parquet/...", may: []string{"backend", "tpu", "ray", "storage", "data", "data/parquet"}},
	{pkg: "serve", may: []string{"backend", "tpu", "ray", "storage", "worker", "internal/rawio"}},
	{pkg: "train", may: []string{"backend", "tpu", "ray", "storage", "data"}},
	{pkg: "dashboard", may: []string{"backend", "tpu", "ray", "storage", "train", "serve", "data", "internal/natsort"}},
	// Test support: above what it tests, never imported by production
	// code (no rule but the examples' and the tests' lists it).
	{pkg: "backend/backendtest", may: []string{"backend", "tpu", "ray", "internal/testkit"}},
	{pkg: "backend/cluster/clustertest", may: []string{"backend", "tpu", "backend/cluster"}},
	{pkg: "storage/storagetest", may: []string{"backend", "tpu", "storage"}},
	{pkg: "internal/testkit", may: []string{"backend", "tpu", "ray"}},
	{pkg: "internal/layout"},
	{pkg: "internal/kubeharness/...", may: []string{"tpu"}},
	{pkg: "dashboard/browsertest", may: []string{"backend/...", "tpu", "ray", "dashboard"}},
	{pkg: "serve/promtest", may: []string{"backend/...", "tpu", "ray", "serve"}},
	// The top: programs, the only places that pick a backend.
	{pkg: "cmd/goray/...", may: []string{"backend", "backend/local", "backend/kubernetes", "tpu", "ray", "dashboard", "storage", "train", "serve", "data"}},
	{pkg: "examples/...", may: []string{"backend", "backend/local", "backend/fake", "tpu", "ray", "ray/raywire", "storage", "train", "serve", "data", "data/parquet"}},
}

// matches reports whether rel (a path relative to the module path) is
// matched by pattern, and how specifically (longer is more specific).
func matches(pattern, rel string) (bool, int) {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		if rel == base || strings.HasPrefix(rel, base+"/") {
			return true, len(base)
		}
		return false, 0
	}
	if rel == pattern {
		return true, len(pattern) + 1 // an exact rule beats "pattern/..."
	}
	return false, 0
}

// ruleFor returns the most specific rule for rel, or nil.
func ruleFor(rules []layerRule, rel string) *layerRule {
	var best *layerRule
	bestLen := -1
	for i := range rules {
		if ok, n := matches(rules[i].pkg, rel); ok && n > bestLen {
			best, bestLen = &rules[i], n
		}
	}
	return best
}

// checkLayers checks an import graph (goray import path → the import
// paths of its production imports) against rules and returns one message
// per violation, sorted.
func checkLayers(rules []layerRule, graph map[string][]string) []string {
	var bad []string
	for pkg, imports := range graph {
		if !isGoray(pkg) {
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, prefix), "/")
		r := ruleFor(rules, rel)
		if r == nil {
			bad = append(bad, fmt.Sprintf("%s has no layering rule: add it to layerRules (internal/layout/layers_test.go) where DESIGN.md's layers put it", pkg))
			continue
		}
		for _, imp := range imports {
			if !isGoray(imp) {
				for _, n := range r.never {
					if imp == n || strings.HasPrefix(imp, n+"/") {
						bad = append(bad, fmt.Sprintf("%s imports %s, which rule %q forbids", pkg, imp, r.pkg))
					}
				}
				continue
			}
			irel := strings.TrimPrefix(strings.TrimPrefix(imp, prefix), "/")
			if irel == rel {
				continue
			}
			if !slices.ContainsFunc(r.may, func(p string) bool { ok, _ := matches(p, irel); return ok }) {
				bad = append(bad, fmt.Sprintf("%s imports %s: against DESIGN.md's layers, rule %q may import only %v", pkg, imp, r.pkg, r.may))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// importGraph lists the packages of the module in dir (all of them with
// tags, e.g. "e2e browser") and their production imports.
func importGraph(t *testing.T, dir, tags string) map[string][]string {
	t.Helper()
	args := []string{"list", "-e", "-f", `{{.ImportPath}} {{join .Imports " "}}`}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("go list in %s: %v\n%s", dir, err, ee.Stderr)
	}
	if err != nil {
		t.Fatalf("go list in %s: %v", dir, err)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 {
			graph[f[0]] = f[1:]
		}
	}
	return graph
}

// TestLayering holds DESIGN.md's dependency arrows (layerRules) on the
// root module's packages, and with GORAY_NESTED_MODULES=1 (.ci/run) on
// the nested modules' too (listing those needs their dependencies).
func TestLayering(t *testing.T) {
	is := is.New(t)
	root, err := moduleRoot()
	is.NoErr(err)
	graph := importGraph(t, root, "")
	is.True(len(graph) > 20) // listed the module
	if os.Getenv(nestedModulesEnv) == "1" {
		for _, dir := range publishedModules(t, root) {
			if dir != "." {
				for p, imps := range importGraph(t, filepath.Join(root, dir), "e2e browser") {
					graph[p] = imps
				}
			}
		}
	}
	for _, msg := range checkLayers(layerRules, graph) {
		t.Error(msg)
	}
}

// TestCheckLayers shows the checker failing: a made-up graph with each
// arrow of DESIGN.md reversed once, a library importing a backend, ray
// importing Wire, and a package no rule places.
func TestCheckLayers(t *testing.T) {
	is := is.New(t)
	g := func(rel string) string { return prefix + "/" + rel }
	graph := map[string][]string{
		g("tpu"):                  {g("backend")},                   // tpu below backend
		g("backend"):              {g("tpu"), g("backend/cluster")}, // the runtime above backend
		g("backend/cluster"):      {g("backend"), g("backend/local")},
		g("worker"):               {g("ray")},                               // ray above worker
		g("ray"):                  {g("backend"), "github.com/google/wire"}, // wire stays out of ray
		g("train"):                {g("ray"), g("backend/local")},           // libraries import no backend
		g("data"):                 {g("ray"), g("train")},                   // data below train
		g("serve"):                {g("ray"), "net/http"},                   // fine
		g("backend/local"):        {g("backend/cluster/clustertest")},       // no test support in production
		g("newpkg"):               {g("tpu")},                               // not placed
		g("examples/hello"):       {g("backend/local"), g("ray")},           // fine
		g("examples/hello/inner"): {g("backend/cluster")},                   // examples use a backend, not the runtime
	}
	got := checkLayers(layerRules, graph)
	want := []string{
		g("backend") + " imports " + g("backend/cluster"),
		g("backend/cluster") + " imports " + g("backend/local"),
		g("backend/local") + " imports " + g("backend/cluster/clustertest"),
		g("data") + " imports " + g("train"),
		g("examples/hello/inner") + " imports " + g("backend/cluster"),
		g("newpkg") + " has no layering rule",
		g("ray") + " imports github.com/google/wire",
		g("tpu") + " imports " + g("backend"),
		g("train") + " imports " + g("backend/local"),
		g("worker") + " imports " + g("ray"),
	}
	is.Equal(len(got), len(want)) // one violation each
	for i := range want {
		is.True(strings.HasPrefix(got[i], want[i])) // violation reported
	}

	// The repository's own rules accept the graph DESIGN.md draws.
	ok := map[string][]string{
		g("tpu"): nil, g("backend"): {g("tpu")}, g("backend/cluster"): {g("backend"), g("tpu")},
		g("worker"): {g("backend")}, g("backend/local"): {g("backend/cluster"), g("worker")},
		g("ray"): {g("backend"), g("worker"), g("tpu")}, g("train"): {g("ray"), g("storage"), g("data")},
		g("examples/train"): {g("backend/local"), g("train"), g("ray")},
	}
	is.Equal(len(checkLayers(layerRules, ok)), 0)
}
