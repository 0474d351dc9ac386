// Command modproxy builds a Go module proxy in a folder (for GOPROXY=file://)
// from goray's working tree, and sets the version at which goray's modules
// require each other. scripts/check-publish.sh and scripts/release.sh use it;
// it is a module of its own (golang.org/x/mod makes the zips exactly as the
// public proxy does) outside the go.work, so run it with GOWORK=off.
//
//	modproxy setversion -version v0.2.0 <repo>
//	    rewrites every go.mod under <repo> (but tools/) so that a
//	    requirement of a github.com/goray-dev/goray module names v0.2.0.
//	modproxy build -version v0.2.0 -out <proxy dir> <repo>
//	    writes <module>/@v/{list,v0.2.0.info,.mod,.zip} for every module
//	    under <repo> (but tools/), from the files on disk: a module's zip
//	    holds what the public proxy would hold for a tag at that version.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// prefix is the path every goray module starts with.
const prefix = "github.com/goray-dev/goray"

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fl := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	version := fl.String("version", "", "the version, such as v0.2.0 (required)")
	out := fl.String("out", "", "build: the proxy folder to write (required)")
	_ = fl.Parse(os.Args[2:])
	if fl.NArg() != 1 || !semver.IsValid(*version) || semver.Canonical(*version) != *version {
		fmt.Fprintf(os.Stderr, "modproxy %s: want -version vMAJOR.MINOR.PATCH[-pre] (got %q) and one repository folder (got %d)\n", os.Args[1], *version, fl.NArg())
		os.Exit(2)
	}
	mods, err := modules(fl.Arg(0))
	if err == nil {
		switch os.Args[1] {
		case "setversion":
			err = setVersion(mods, *version)
			if err == nil {
				err = setWorkVersion(filepath.Join(fl.Arg(0), "go.work"), *version)
			}
		case "build":
			if *out == "" {
				usage()
			}
			err = build(mods, *version, *out)
		default:
			usage()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: modproxy setversion -version vX.Y.Z <repo> | modproxy build -version vX.Y.Z -out <dir> <repo>")
	os.Exit(2)
}

// mod is one module of the repository: its folder and parsed go.mod.
type mod struct {
	dir  string
	path string
	file *modfile.File
}

// modules finds every go.mod under repo, leaving out tools/ (build recipes
// that are never published) and hidden folders such as .cache.
func modules(repo string) ([]mod, error) {
	var mods []mod
	err := filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, p)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "tools" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		if f.Module == nil || !strings.HasPrefix(f.Module.Mod.Path, prefix) {
			return fmt.Errorf("%s: module path must start with %s", p, prefix)
		}
		mods = append(mods, mod{dir: filepath.Dir(p), path: f.Module.Mod.Path, file: f})
		return nil
	})
	if err == nil && len(mods) == 0 {
		err = fmt.Errorf("no go.mod under %s", repo)
	}
	return mods, err
}

// isGoray says whether path is one of goray's modules.
func isGoray(path string) bool { return path == prefix || strings.HasPrefix(path, prefix+"/") }

// setVersion makes every requirement of a goray module name version, and
// refuses a replace directive of one (a published go.mod must not have
// them: go install refuses such a module).
func setVersion(mods []mod, version string) error {
	for _, m := range mods {
		for _, r := range m.file.Replace {
			if isGoray(r.Old.Path) {
				return fmt.Errorf("%s/go.mod replaces %s: goray's modules are developed through go.work, never replaced", m.dir, r.Old.Path)
			}
		}
		changed := false
		for _, r := range m.file.Require {
			if isGoray(r.Mod.Path) && r.Mod.Version != version {
				if err := m.file.AddRequire(r.Mod.Path, version); err != nil {
					return err
				}
				changed = true
			}
		}
		if !changed {
			continue
		}
		m.file.Cleanup()
		data, err := m.file.Format()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(m.dir, "go.mod"), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// workReplace matches a version-pinned replace line of a goray module in
// a go.work, alone or in a block.
var workReplace = regexp.MustCompile(`(?m)^(\s*(?:replace\s+)?)(github\.com/goray-dev/goray(?:/\S*)?)\s+(v\S+)(\s+=>)`)

// setWorkVersion makes the go.work's version-pinned replace lines of
// goray's modules (which let the go command read the go.mod of a version
// that is not published yet) name version, keeping the file's layout and
// comments. A missing go.work is no error.
func setWorkVersion(path, version string) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	out := workReplace.ReplaceAll(data, []byte("${1}${2} "+version+"${4}"))
	if _, err := modfile.ParseWork(path, out, nil); err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// build writes each module at version into the proxy folder out, in the
// layout of the GOPROXY protocol (go help goproxy).
func build(mods []mod, version, out string) error {
	now := time.Now().UTC().Format(time.RFC3339)
	for _, m := range mods {
		esc, err := module.EscapePath(m.path)
		if err != nil {
			return err
		}
		dir := filepath.Join(out, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		base := filepath.Join(dir, version)
		gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
		if err != nil {
			return err
		}
		info, _ := json.Marshal(map[string]string{"Version": version, "Time": now})
		if err := os.WriteFile(base+".mod", gomod, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(base+".info", info, 0o644); err != nil {
			return err
		}
		f, err := os.Create(base + ".zip")
		if err != nil {
			return err
		}
		err = zip.CreateFromDir(f, module.Version{Path: m.path, Version: version}, m.dir)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("zip %s: %w", m.path, err)
		}
		if err := appendList(filepath.Join(dir, "list"), version); err != nil {
			return err
		}
		fmt.Printf("%s@%s\n", m.path, version)
	}
	return nil
}

// appendList adds version to a module's list file unless it is there.
func appendList(path, version string) error {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, v := range strings.Fields(string(data)) {
		if v == version {
			return nil
		}
	}
	return os.WriteFile(path, append(data, version+"\n"...), 0o644)
}
