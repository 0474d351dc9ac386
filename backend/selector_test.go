package backend_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

func TestLabelSelectorMatches(t *testing.T) {
	tpuNode := map[string]string{"zone": "a", "pool": "tpu", "gen": "v6e"}
	cpuNode := map[string]string{"zone": "b", "pool": "cpu"}
	bare := map[string]string{}
	tests := []struct {
		name string
		sel  backend.LabelSelector
		// want[i] is whether the selector matches tpuNode, cpuNode, bare.
		want [3]bool
	}{
		{"nil selector", nil, [3]bool{true, true, true}},
		{"empty selector", backend.LabelSelector{}, [3]bool{true, true, true}},
		{"equals", backend.LabelSelector{"zone": "a"}, [3]bool{true, false, false}},
		{"equals trims spaces", backend.LabelSelector{"zone": "  a "}, [3]bool{true, false, false}},
		{"not equals", backend.LabelSelector{"zone": "!a"}, [3]bool{false, true, true}},
		{"not equals with space", backend.LabelSelector{"zone": "! a"}, [3]bool{false, true, true}},
		{"not equals matches absent label", backend.LabelSelector{"gen": "!v6e"}, [3]bool{false, true, true}},
		{"equals never matches absent label", backend.LabelSelector{"gen": "v5p"}, [3]bool{false, false, false}},
		{"in", backend.LabelSelector{"zone": "in(a,b)"}, [3]bool{true, true, false}},
		{"in one value", backend.LabelSelector{"zone": "in(b)"}, [3]bool{false, true, false}},
		{"in with spaces", backend.LabelSelector{"zone": "in( a , c )"}, [3]bool{true, false, false}},
		{"not in", backend.LabelSelector{"zone": "!in(a,c)"}, [3]bool{false, true, true}},
		{"not in matches absent label", backend.LabelSelector{"gen": "!in(v5p,v4)"}, [3]bool{true, true, true}},
		{"all entries must hold", backend.LabelSelector{"zone": "in(a,b)", "pool": "tpu"}, [3]bool{true, false, false}},
		{"all entries must hold, negated", backend.LabelSelector{"zone": "in(a,b)", "pool": "!tpu"}, [3]bool{false, true, false}},
		{"malformed matches nothing", backend.LabelSelector{"zone": "in(a,b"}, [3]bool{false, false, false}},
		{"malformed negation matches nothing", backend.LabelSelector{"zone": "!"}, [3]bool{false, false, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			nodes := []map[string]string{tpuNode, cpuNode, bare}
			for i, labels := range nodes {
				is.Equal(tt.sel.Matches(labels), tt.want[i]) // LabelSelector.Matches
			}
			m, err := tt.sel.Compile()
			if tt.sel.Validate() != nil {
				is.True(err != nil) // Compile fails exactly when Validate does
				return
			}
			is.NoErr(err)
			is.Equal(m.Empty(), len(tt.sel) == 0)
			for i, labels := range nodes {
				is.Equal(m.Matches(labels), tt.want[i]) // the compiled Matcher agrees
			}
		})
	}
}

func TestLabelSelectorValidate(t *testing.T) {
	tests := []struct {
		name    string
		sel     backend.LabelSelector
		wantErr []string // substrings of the error; nil means valid
	}{
		{"nil", nil, nil},
		{"every form", backend.LabelSelector{"a": "x", "b": "!x", "c": "in(x,y)", "d": "!in(x, y)"}, nil},
		{"empty key", backend.LabelSelector{"": "x"}, []string{"empty key"}},
		{"empty value", backend.LabelSelector{"zone": ""}, []string{`"zone"`, "empty value", "want v, !v, in(a,b) or !in(a,b)"}},
		{"blank value", backend.LabelSelector{"zone": "   "}, []string{`"zone"`, "empty value"}},
		{"bare negation", backend.LabelSelector{"zone": "!"}, []string{`"zone"`, `"!"`, "empty value"}},
		{"missing paren", backend.LabelSelector{"zone": "in(a,b"}, []string{`"zone"`, `"in(a,b"`, "missing ')'"}},
		{"empty list", backend.LabelSelector{"zone": "in()"}, []string{`"zone"`, "empty value in list"}},
		{"empty list entry", backend.LabelSelector{"zone": "in(a,,b)"}, []string{"empty value in list"}},
		{"trailing comma", backend.LabelSelector{"zone": "!in(a,)"}, []string{"empty value in list"}},
		{"comma without in", backend.LabelSelector{"zone": "a,b"}, []string{`"a,b"`, "unexpected character"}},
		{"paren without in", backend.LabelSelector{"zone": "notin(a)"}, []string{"unexpected character"}},
		{"space before paren", backend.LabelSelector{"zone": "in (a)"}, []string{"unexpected character"}},
		{"doubled negation of a list", backend.LabelSelector{"zone": "!!in(a)"}, []string{"unexpected character"}},
		{"first bad key in order", backend.LabelSelector{"b": "in(", "a": "in("}, []string{`"a"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			err := tt.sel.Validate()
			if tt.wantErr == nil {
				is.NoErr(err)
				return
			}
			is.True(err != nil)
			is.True(errors.Is(err, backend.ErrInvalidArgument))
			for _, want := range tt.wantErr {
				is.True(strings.Contains(err.Error(), want)) // error names what is wrong
			}
			m, cerr := tt.sel.Compile()
			is.Equal(cerr.Error(), err.Error()) // Compile reports the same error
			is.True(m.Empty())                  // and returns the zero Matcher
		})
	}
}

func TestLabelSelectorRejectsMalformedValues(t *testing.T) {
	for _, expr := range []string{"in(a)b)", "in(a,b))", "in(a,(b)", "!!v"} {
		t.Run(expr, func(t *testing.T) {
			is := is.New(t)
			err := backend.LabelSelector{"zone": expr}.Validate()
			is.True(err != nil) // malformed expression must be rejected
		})
	}
}

func TestZeroMatcher(t *testing.T) {
	is := is.New(t)
	var m backend.Matcher
	is.True(m.Empty())
	is.True(m.Matches(nil))
	is.True(m.Matches(map[string]string{"zone": "a"}))
}

func TestLabelSelectorMerge(t *testing.T) {
	tests := []struct {
		name string
		s, o backend.LabelSelector
		want backend.LabelSelector
	}{
		{"both nil", nil, nil, nil},
		{"nil base", nil, backend.LabelSelector{"a": "x"}, backend.LabelSelector{"a": "x"}},
		{"nil overlay", backend.LabelSelector{"a": "x"}, nil, backend.LabelSelector{"a": "x"}},
		{"disjoint", backend.LabelSelector{"a": "x"}, backend.LabelSelector{"b": "y"}, backend.LabelSelector{"a": "x", "b": "y"}},
		{"overlay wins", backend.LabelSelector{"a": "x", "b": "y"}, backend.LabelSelector{"a": "!x"}, backend.LabelSelector{"a": "!x", "b": "y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			before := tt.s.String()
			got := tt.s.Merge(tt.o)
			is.Equal(len(got), len(tt.want))
			for k, v := range tt.want {
				is.Equal(got[k], v)
			}
			is.Equal(tt.s.String(), before) // the receiver is not modified
		})
	}
}

func TestLabelSelectorString(t *testing.T) {
	tests := []struct {
		sel  backend.LabelSelector
		want string
	}{
		{nil, "{}"},
		{backend.LabelSelector{"b": "z", "a": "in(x,y)"}, "{a=in(x,y), b=z}"},
		{backend.LabelSelector{"zone": "!a", "pool": "tpu", "gen": "!in(v4,v5p)"}, "{gen=!in(v4,v5p), pool=tpu, zone=!a}"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			is := is.New(t)
			for range 5 { // map order must not leak into the string
				is.Equal(tt.sel.String(), tt.want)
			}
		})
	}
}

// FuzzLabelSelector checks that no selector panics, that Compile agrees with
// Validate and the compiled Matcher with LabelSelector.Matches, and that a
// malformed expression matches nothing.
func FuzzLabelSelector(f *testing.F) {
	for _, seed := range [][3]string{
		{"zone", "a", "a"}, {"zone", "!a", "b"}, {"zone", "in(a,b)", "b"}, {"zone", "!in(a,b)", ""},
		{"zone", "in(", "a"}, {"zone", "in()", ""}, {"zone", "!", "x"}, {"", "x", "x"}, {"k", "in(a,,b)", "a"},
		{"k", " ! in( a ) ", "a"}, {"k", "in(a)b)", "a)b"}, {"k", "\x00(", "\x00"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, key, expr, value string) {
		sel := backend.LabelSelector{key: expr}
		for _, labels := range []map[string]string{nil, {key: value}, {key + "x": value}} {
			verr := sel.Validate()
			m, cerr := sel.Compile()
			if (verr == nil) != (cerr == nil) {
				t.Fatalf("Validate %v but Compile %v for %v", verr, cerr, sel)
			}
			got := sel.Matches(labels)
			_ = sel.String()
			_ = sel.Merge(backend.LabelSelector{"other": expr})
			if verr != nil {
				if backend.CodeOf(verr) != backend.InvalidArgument {
					t.Fatalf("Validate error %v has code %v", verr, backend.CodeOf(verr))
				}
				if key != "" && got {
					t.Fatalf("malformed selector %v matched %v", sel, labels)
				}
				continue
			}
			if m.Matches(labels) != got {
				t.Fatalf("Matcher and LabelSelector disagree on %v for %v", sel, labels)
			}
		}
	})
}
