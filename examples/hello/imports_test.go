package main

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/matryer/is"
)

// TestExamplesImportNoBackend checks that every example program imports ray
// and a backend package, never package backend (which is for backend
// authors): what a program names is re-exported by ray or the backend.
func TestExamplesImportNoBackend(t *testing.T) {
	is := is.New(t)
	files, err := filepath.Glob("../*/*.go")
	is.NoErr(err)
	is.True(len(files) > 0)
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		is.NoErr(err)
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == "github.com/goray-dev/goray/backend" {
				t.Errorf("%s imports package backend; use the names ray and the backend package re-export", f)
			}
		}
	}
}
