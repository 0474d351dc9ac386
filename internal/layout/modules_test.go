package layout

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/matryer/is"
)

// goMod is the part of `go mod edit -json` these tests read.
type goMod struct {
	Module  struct{ Path string }
	Require []struct {
		Path, Version string
		Indirect      bool
	}
	Replace []struct {
		Old struct{ Path, Version string }
		New struct{ Path, Version string }
	}
}

// goWork is the part of `go work edit -json` these tests read.
type goWork struct {
	Use     []struct{ DiskPath string }
	Replace []struct {
		Old struct{ Path, Version string }
		New struct{ Path, Version string }
	}
}

const prefix = "github.com/goray-dev/goray"

// nestedModulesEnv, set to 1, runs the tests that load the nested modules'
// dependencies (TestNoInternalAcrossModules); the README's `go test ./...`
// needs only the root module's.
const nestedModulesEnv = "GORAY_NESTED_MODULES"

func isGoray(path string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }

// editJSON runs `go <mod|work> edit -json file` in root and decodes it.
func editJSON(t *testing.T, root, kind, file string, v any) {
	t.Helper()
	cmd := exec.Command("go", kind, "edit", "-json", file)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s edit -json %s: %v", kind, file, err)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("decode go %s edit -json %s: %v", kind, file, err)
	}
}

// publishedModules lists the folders (relative to root) of every go.mod
// the repository tracks, but tools/ (build recipes for the test harness's
// binaries, never published; tools/k8s needs replace directives to build
// k8s.io/kubernetes at all).
func publishedModules(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "go.mod", "*/go.mod")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	var dirs []string
	for _, f := range strings.Fields(string(out)) {
		if !strings.HasPrefix(f, "tools/") {
			dirs = append(dirs, filepath.Dir(f))
		}
	}
	return dirs
}

// TestModulesPublishable keeps the module layout publishable: no go.mod
// replaces a goray module (go install refuses a module with replace
// directives, and a replace is ignored in a dependency anyway), nested
// modules require goray's modules at one version (they are tagged in
// lockstep by scripts/release.sh), the root module requires no other goray
// module, and every module is in go.work, whose version-pinned replace
// lines match that version. scripts/check-publish.sh proves the same
// through a module proxy.
func TestModulesPublishable(t *testing.T) {
	is := is.New(t)
	root, err := moduleRoot()
	is.NoErr(err)
	dirs := publishedModules(t, root)
	is.True(len(dirs) >= 5) // the root and the nested modules

	versions := map[string][]string{} // version -> modules that require it
	for _, dir := range dirs {
		var m goMod
		editJSON(t, root, "mod", filepath.Join(dir, "go.mod"), &m)
		for _, r := range m.Replace {
			t.Errorf("%s/go.mod replaces %s: develop through go.work instead (a published module must have no replace directive)", dir, r.Old.Path)
		}
		for _, r := range m.Require {
			if !isGoray(r.Path) {
				continue
			}
			if dir == "." {
				t.Errorf("the root module requires %s: the root must not depend on its nested modules", r.Path)
			}
			versions[r.Version] = append(versions[r.Version], dir+" → "+r.Path)
		}
	}
	if len(versions) != 1 {
		t.Errorf("goray's modules require each other at %d versions, want one (scripts/release.sh sets it): %v", len(versions), versions)
	}

	var w goWork
	editJSON(t, root, "work", "go.work", &w)
	used := map[string]bool{}
	for _, u := range w.Use {
		used[filepath.Clean(u.DiskPath)] = true
	}
	for _, dir := range dirs {
		if !used[dir] {
			t.Errorf("go.work does not use %s: add it (go work use ./%s)", dir, dir)
		}
	}
	for _, r := range w.Replace {
		if !isGoray(r.Old.Path) {
			t.Errorf("go.work replaces %s: only goray's own modules may be replaced there", r.Old.Path)
			continue
		}
		if _, ok := versions[r.Old.Version]; !ok {
			t.Errorf("go.work replaces %s@%s, but the modules require goray's modules at %v", r.Old.Path, r.Old.Version, keys(versions))
		}
	}
}

// TestRootRequiresNoKubernetes keeps users of the simulator free of the
// Kubernetes client's and chromedp's version floors: the root go.mod does
// not require them (the harness and the browser tests are modules of their
// own).
func TestRootRequiresNoKubernetes(t *testing.T) {
	is := is.New(t)
	root, err := moduleRoot()
	is.NoErr(err)
	var m goMod
	editJSON(t, root, "mod", "go.mod", &m)
	is.True(len(m.Require) > 3) // read the root go.mod
	for _, r := range m.Require {
		if kubernetesImport(r.Path) || strings.HasPrefix(r.Path, "github.com/chromedp/") {
			t.Errorf("the root go.mod requires %s %s: only nested modules may (backend/kubernetes, internal/kubeharness, dashboard/browsertest)", r.Path, r.Version)
		}
	}
}

func keys(m map[string][]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// tempDirName matches the folders t.TempDir makes (TestName123456789).
var tempDirName = regexp.MustCompile(`^Test\w*\d{6,}$`)

// TestNoTestArtifactsTracked: no tracked file lies under a tmp folder or
// a folder made by t.TempDir (a test run once left
// storage/gocloud/tmp/TestOpenWithPrefix3686979308/001/k committed).
func TestNoTestArtifactsTracked(t *testing.T) {
	is := is.New(t)
	root, err := moduleRoot()
	is.NoErr(err)
	cmd := exec.Command("git", "ls-files")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	files := strings.Fields(string(out))
	is.True(len(files) > 100) // listed the repository
	for _, f := range files {
		for _, seg := range strings.Split(filepath.Dir(f), "/") {
			if seg == "tmp" || tempDirName.MatchString(seg) {
				t.Errorf("%s is tracked but looks like a test's leftover (folder %q): remove it", f, seg)
				break
			}
		}
	}
}

// TestNoInternalAcrossModules: a nested module (its tests included) never
// imports an internal package of another goray module. Go's internal rule
// is by import path, so the workspace compiles it, but a published nested
// module would then break whenever the root's internal package changes,
// and the module proxy check cannot tidy it. A module under internal/
// (internal/kubeharness) is a module of its own and may be imported.
//
// It lists every nested module with -tags "e2e browser", which needs their
// dependencies (client-go, gocloud.dev, gRPC, chromedp: about 1 GB of
// module downloads into an empty module cache), so the README's
// `go test ./...` skips it: CI runs it as a step of its own (.ci/run,
// with GORAY_NESTED_MODULES=1), after the nested modules' tests have
// downloaded those dependencies anyway.
func TestNoInternalAcrossModules(t *testing.T) {
	if os.Getenv(nestedModulesEnv) != "1" {
		t.Skipf("lists the nested modules with their dependencies (about 1 GB to download); set %s=1 to run it (.ci/run does)", nestedModulesEnv)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	mods := publishedModules(t, root)
	modOf := func(importPath string) string { // the module dir an import path lives in
		rel := strings.TrimPrefix(strings.TrimPrefix(importPath, prefix), "/")
		best := "."
		for _, m := range mods {
			if m != "." && (rel == m || strings.HasPrefix(rel, m+"/")) && len(m) > len(best) {
				best = m
			}
		}
		return best
	}
	checked := 0
	for _, m := range mods {
		if m == "." {
			continue
		}
		cmd := exec.Command("go", "list", "-e", "-tags", "e2e browser", "-f", "{{.ImportPath}}: {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./...")
		cmd.Dir = filepath.Join(root, m)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", m, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			pkg, imports, _ := strings.Cut(line, ": ")
			checked++
			for _, imp := range strings.Fields(imports) {
				if !isGoray(imp) {
					continue
				}
				owner := modOf(imp)
				rel := strings.TrimPrefix(strings.TrimPrefix(imp, prefix), "/")
				inside := rel // the path inside the owner module
				if owner != "." {
					inside = strings.TrimPrefix(strings.TrimPrefix(rel, owner), "/")
				}
				if owner != m && strings.Contains("/"+inside+"/", "/internal/") {
					t.Errorf("%s (module %s) imports %s, an internal package of module %s", pkg, m, imp, owner)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no package listed")
	}
}
