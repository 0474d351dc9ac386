package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/matryer/is"
)

// TestDocCommentsNameTheirDeclaration: the doc comment of every exported
// top-level declaration of the packages users and backend authors read
// starts with its name (Go's convention; a stale comment left behind by a
// rename shows up here, as "Code is ..." on type ErrorCode did).
func TestDocCommentsNameTheirDeclaration(t *testing.T) {
	is := is.New(t)
	root, err := moduleRoot()
	is.NoErr(err)
	checked := 0
	for _, dir := range []string{"ray", "backend", "backend/cluster", "backend/cluster/clustertest", "tpu"} {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, filepath.Join(root, dir), func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments)
		is.NoErr(err)
		for _, pkg := range pkgs {
			for _, f := range pkg.Files {
				for _, d := range f.Decls {
					name, doc, ok := declDoc(d)
					if !ok || doc == nil || !ast.IsExported(name) {
						continue
					}
					checked++
					text := doc.Text()
					first := strings.Fields(text)
					if len(first) == 0 {
						continue
					}
					w := strings.TrimRight(first[0], ",.:")
					if w != name && w != "A" && w != "An" && w != "The" && w != "Deprecated:" {
						t.Errorf("%s: the doc comment of %s starts with %q", fset.Position(d.Pos()), name, first[0])
					}
				}
			}
		}
	}
	is.True(checked > 100) // read the packages
}

// declDoc returns a single-name declaration's name and doc comment.
func declDoc(d ast.Decl) (string, *ast.CommentGroup, bool) {
	switch d := d.(type) {
	case *ast.FuncDecl:
		if d.Recv != nil {
			return "", nil, false // methods: their receiver type is checked
		}
		return d.Name.Name, d.Doc, true
	case *ast.GenDecl:
		if len(d.Specs) != 1 || d.Lparen.IsValid() {
			return "", nil, false // a group documents itself
		}
		switch s := d.Specs[0].(type) {
		case *ast.TypeSpec:
			return s.Name.Name, d.Doc, true
		case *ast.ValueSpec:
			if len(s.Names) == 1 {
				return s.Names[0].Name, d.Doc, true
			}
		}
	}
	return "", nil, false
}

// historyRef matches references to the project's own tracker and plans
// ("issue 8", "item 3", "mode 3b"), which mean nothing to users.
var historyRef = regexp.MustCompile(`(?i)\b(issue|item)\s+#?\d+\b|\bmode\s+\d+[a-z]\b`)

// TestDocsSayTheBehaviourNotTheHistory: the README, docs/ and the Go
// files users read say what the behaviour is, not which issue or plan
// item brought it.
func TestDocsSayTheBehaviourNotTheHistory(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules" || rel == "internal/layout" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".md") && !(strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			m := historyRef.FindString(line)
			if m == "" && i+1 < len(lines) {
				// A reference broken across two comment or text lines
				// ("(mode" / "// 3b)").
				next := strings.TrimPrefix(strings.TrimSpace(lines[i+1]), "//")
				m = historyRef.FindString(line + " " + strings.TrimSpace(next))
				if historyRef.MatchString(lines[i+1]) {
					m = "" // reported on its own line
				}
			}
			if m != "" {
				t.Errorf("%s:%d says %q: say what the behaviour is instead", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked only %d files under %s", checked, root)
	}
}
