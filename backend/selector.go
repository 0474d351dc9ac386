package backend

import (
	"fmt"
	"slices"
	"strings"
)

// LabelSelector selects nodes by label, with Ray's label selector syntax:
// each key maps to an expression that the node's label must satisfy.
//
//	"v"          the label equals v
//	"!v"         the label is absent or differs from v
//	"in(a,b)"    the label is one of a, b
//	"!in(a,b)"   the label is absent or none of a, b
//
// All entries must hold. A nil or empty selector matches every node.
type LabelSelector map[string]string

// Validate returns an InvalidArgument error for malformed expressions.
func (s LabelSelector) Validate() error {
	for _, k := range s.keys() {
		if k == "" {
			return Errorf(InvalidArgument, "", "label selector has an empty key")
		}
		if _, err := parseExpr(s[k]); err != nil {
			return Errorf(InvalidArgument, "", "label selector %q: %v", k, err)
		}
	}
	return nil
}

// Matches reports whether labels satisfy every entry of s. Malformed
// expressions match nothing.
func (s LabelSelector) Matches(labels map[string]string) bool {
	for k, expr := range s {
		v, ok := labels[k]
		e, err := parseExpr(expr)
		if err != nil || !e.matches(v, ok) {
			return false
		}
	}
	return true
}

// Merge returns s with o's entries added; o wins on conflicts.
func (s LabelSelector) Merge(o LabelSelector) LabelSelector {
	if len(o) == 0 {
		return s
	}
	out := make(LabelSelector, len(s)+len(o))
	for k, v := range s {
		out[k] = v
	}
	for k, v := range o {
		out[k] = v
	}
	return out
}

// String renders the selector sorted by key, e.g. "{a=in(x,y), b=z}".
func (s LabelSelector) String() string {
	parts := make([]string, 0, len(s))
	for _, k := range s.keys() {
		parts = append(parts, k+"="+s[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func (s LabelSelector) keys() []string {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

type selectorExpr struct {
	negate bool
	values []string
}

func (e selectorExpr) matches(v string, present bool) bool {
	in := present && slices.Contains(e.values, v)
	return in != e.negate
}

func parseExpr(expr string) (selectorExpr, error) {
	var e selectorExpr
	x := strings.TrimSpace(expr)
	if strings.HasPrefix(x, "!") {
		e.negate = true
		x = strings.TrimSpace(x[1:])
	}
	if strings.HasPrefix(x, "in(") {
		if !strings.HasSuffix(x, ")") {
			return e, fmt.Errorf("expression %q: missing ')'; want v, !v, in(a,b) or !in(a,b)", expr)
		}
		for _, v := range strings.Split(x[3:len(x)-1], ",") {
			v = strings.TrimSpace(v)
			if v == "" {
				return e, fmt.Errorf("expression %q: empty value in list", expr)
			}
			if strings.ContainsAny(v, "()!") {
				return e, fmt.Errorf("expression %q: unexpected character in list value %q; want v, !v, in(a,b) or !in(a,b)", expr, v)
			}
			e.values = append(e.values, v)
		}
		return e, nil
	}
	if x == "" {
		return e, fmt.Errorf("expression %q: empty value; want v, !v, in(a,b) or !in(a,b)", expr)
	}
	if strings.ContainsAny(x, "(),!") {
		return e, fmt.Errorf("expression %q: unexpected character; want v, !v, in(a,b) or !in(a,b)", expr)
	}
	e.values = []string{x}
	return e, nil
}

// Matcher is a compiled LabelSelector; build it with [LabelSelector.Compile].
// The zero value matches everything. It is immutable and safe for concurrent
// use.
type Matcher struct {
	keys  []string
	exprs []selectorExpr
}

// Compile parses s once for fast repeated matching.
func (s LabelSelector) Compile() (Matcher, error) {
	if err := s.Validate(); err != nil {
		return Matcher{}, err
	}
	var m Matcher
	for _, k := range s.keys() {
		e, _ := parseExpr(s[k])
		m.keys = append(m.keys, k)
		m.exprs = append(m.exprs, e)
	}
	return m, nil
}

// Matches reports whether labels satisfy the selector.
func (m Matcher) Matches(labels map[string]string) bool {
	for i, k := range m.keys {
		v, ok := labels[k]
		if !m.exprs[i].matches(v, ok) {
			return false
		}
	}
	return true
}

// Empty reports whether the matcher matches everything.
func (m Matcher) Empty() bool { return len(m.keys) == 0 }
