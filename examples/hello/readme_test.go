package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend/local"
)

// snippet is a fenced block of README.md.
type snippet struct {
	lang  string
	line  int      // README line of the opening fence
	link  string   // the last link to a file between it and the previous block or heading
	lines []string // the block's lines
}

var linkRE = regexp.MustCompile(`\]\(([^)#]+\.[a-z]+)\)`)

// readmeSnippets splits a markdown file into its fenced blocks.
func readmeSnippets(path string) ([]snippet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out  []snippet
		cur  *snippet
		link string
		n    int
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		l := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &snippet{lang: strings.TrimPrefix(l, "```"), line: n, link: link}
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur, link = nil, ""
		case cur != nil:
			cur.lines = append(cur.lines, l)
		case strings.HasPrefix(l, "#"):
			link = "" // a new section
		default:
			if m := linkRE.FindAllStringSubmatch(l, -1); m != nil {
				link = m[len(m)-1][1]
			}
		}
	}
	return out, sc.Err()
}

// missingLine returns the first line of excerpt that does not appear in
// file, in order after the lines before it, comparing lines without their
// indentation. A line `// ...` in excerpt stands for lines left out.
func missingLine(excerpt, file []string) (string, bool) {
	i := 0
	for _, want := range excerpt {
		want = strings.TrimSpace(want)
		if want == "" || want == "// ..." {
			continue
		}
		for i < len(file) && strings.TrimSpace(file[i]) != want {
			i++
		}
		if i == len(file) {
			return want, true
		}
		i++
	}
	return "", false
}

// TestREADMESnippets keeps the README honest: every Go snippet links, in
// the text just above it, to the file it comes from, and each of its lines
// appears there in order; every other snippet that links to a file
// matches it the same way; and the JSON cluster file is a valid cluster.
func TestREADMESnippets(t *testing.T) {
	root := filepath.Join("..", "..")
	snippets, err := readmeSnippets(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	goSnippets := 0
	for _, s := range snippets {
		t.Run(s.lang+" at README.md line "+strconv.Itoa(s.line), func(t *testing.T) {
			is := is.New(t)
			switch {
			case s.lang == "json":
				spec, err := local.ParseClusterSpec([]byte(strings.Join(s.lines, "\n")))
				is.NoErr(err)
				b, err := local.New(spec, nil)
				is.NoErr(err)
				is.NoErr(b.Close())
				return
			case s.lang == "go":
				goSnippets++
				if s.link == "" {
					t.Fatal("a Go snippet needs a link to the file it comes from in the text just above it")
				}
			case s.link == "":
				return // a shell command or a layout sketch
			}
			data, err := os.ReadFile(filepath.Join(root, s.link))
			is.NoErr(err) // the linked file exists
			if line, missing := missingLine(s.lines, strings.Split(string(data), "\n")); missing {
				t.Errorf("%q is not in %s (or not in the order shown)", line, s.link)
			}
		})
	}
	is.New(t).True(goSnippets >= 5) // the tour is still there
}

func TestMissingLine(t *testing.T) {
	file := []string{"func f() {", "\ta := 1", "\tb := 2", "\treturn a + b", "}"}
	cases := []struct {
		name    string
		excerpt []string
		missing string
	}{
		{name: "all, unindented", excerpt: []string{"a := 1", "b := 2"}},
		{name: "gap marked", excerpt: []string{"func f() {", "// ...", "return a + b"}},
		{name: "gap unmarked", excerpt: []string{"a := 1", "return a + b"}},
		{name: "changed line", excerpt: []string{"a := 1", "b := 3"}, missing: "b := 3"},
		{name: "out of order", excerpt: []string{"b := 2", "a := 1"}, missing: "a := 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			is := is.New(t)
			line, missing := missingLine(tc.excerpt, file)
			is.Equal(missing, tc.missing != "")
			is.Equal(line, tc.missing)
		})
	}
}
