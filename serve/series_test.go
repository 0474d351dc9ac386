package serve

import (
	"testing"

	"github.com/matryer/is"
)

// TestSeriesLabelEscaping: label values are escaped as the Prometheus text
// format defines (backslash, double quote and line feed only; a tab or a
// non-ASCII rune stands as itself), not as Go quotes strings.
func TestSeriesLabelEscaping(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"llm", `m{deployment="llm"}`},
		{`a"b`, `m{deployment="a\"b"}`},
		{`a\b`, `m{deployment="a\\b"}`},
		{"a\nb", `m{deployment="a\nb"}`},
		{"a\tb", "m{deployment=\"a\tb\"}"},
		{"modèle", `m{deployment="modèle"}`},
	} {
		t.Run(tc.value, func(t *testing.T) {
			is := is.New(t)
			is.Equal(series("m", "deployment", tc.value), tc.want)
		})
	}
	is := is.New(t)
	is.Equal(series("m", "code", "200", "deployment", "x"), `m{code="200",deployment="x"}`)
	is.Equal(series("m"), "m")
}
