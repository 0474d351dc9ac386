package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// Entry kinds of a [Manifest].
const (
	KindTask   = "task"
	KindActor  = "actor"
	KindMethod = "method"
)

// Entry is one registered name of a program: a task, an actor class or an
// actor method, with the Go types it takes and returns.
type Entry struct {
	// Kind is KindTask, KindActor or KindMethod.
	Kind string `json:"kind"`
	// Name is the registered name; "class.method" for a method.
	Name string `json:"name"`
	// Signature describes the Go types, as written by [TypeString]: for
	// a task or method "func(I) O", for an actor class "func(I) A".
	Signature string `json:"sig"`
}

func (e Entry) key() string { return e.Kind + " " + e.Name }

// Manifest describes the code a process can run: the codec its values are
// encoded with and every registered name with its types. A driver and a
// worker may talk only if their manifests are equal, which is what they
// check in the handshake ([Manifest.Fingerprint] is its digest).
//
// The zero value is an empty manifest. A Manifest is a plain value; do not
// modify one that is in use.
type Manifest struct {
	// Codec is the name of the codec arguments and results are encoded
	// with; empty means values are not encoded, which cannot cross a
	// process boundary.
	Codec string `json:"codec"`
	// Entries lists the registered names, sorted by kind and name.
	Entries []Entry `json:"entries"`
}

// Describer is implemented by executors that can describe the code they run;
// the executor of package ray does. A backend that runs work in worker
// processes sends the description to its workers in the handshake.
type Describer interface {
	WorkerManifest() Manifest
}

// ManifestOf returns the manifest of exec, which must implement
// [Describer].
func ManifestOf(exec any) (Manifest, bool) {
	d, ok := exec.(Describer)
	if !ok {
		return Manifest{}, false
	}
	return d.WorkerManifest(), true
}

// Sort sorts the entries by kind and name.
func (m *Manifest) Sort() {
	slices.SortFunc(m.Entries, func(a, b Entry) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// Fingerprint returns a hex SHA-256 digest of the codec and the sorted
// entries.
func (m Manifest) Fingerprint() string {
	h := sha256.New()
	fmt.Fprintf(h, "codec %q\n", m.Codec)
	es := slices.Clone(m.Entries)
	mm := Manifest{Entries: es}
	mm.Sort()
	for _, e := range es {
		fmt.Fprintf(h, "%q %q %q\n", e.Kind, e.Name, e.Signature)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// maxDiffs bounds how many differences Diff names.
const maxDiffs = 8

// Diff describes how the worker's manifest differs from the driver's, in a
// sentence naming each difference (at most a few, then a count), or returns
// "" when they are equal.
func Diff(driver, worker Manifest) string {
	var out []string
	if driver.Codec != worker.Codec {
		out = append(out, fmt.Sprintf("the driver encodes with codec %q, the worker with %q", driver.Codec, worker.Codec))
	}
	d := index(driver.Entries)
	w := index(worker.Entries)
	keys := make([]string, 0, len(d)+len(w))
	for k := range d {
		keys = append(keys, k)
	}
	for k := range w {
		if _, ok := d[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		de, inD := d[k]
		we, inW := w[k]
		switch {
		case !inW:
			out = append(out, fmt.Sprintf("%s %q is registered only in the driver (%s)", de.Kind, de.Name, de.Signature))
		case !inD:
			out = append(out, fmt.Sprintf("%s %q is registered only in the worker (%s)", we.Kind, we.Name, we.Signature))
		case de.Signature != we.Signature:
			out = append(out, fmt.Sprintf("%s %q is %s in the driver but %s in the worker", de.Kind, de.Name, de.Signature, we.Signature))
		}
	}
	if len(out) == 0 {
		return ""
	}
	if len(out) > maxDiffs {
		n := len(out) - maxDiffs
		out = append(out[:maxDiffs], fmt.Sprintf("and %d more differences", n))
	}
	return strings.Join(out, "; ")
}

func index(es []Entry) map[string]Entry {
	m := make(map[string]Entry, len(es))
	for _, e := range es {
		m[e.key()] = e
	}
	return m
}

// TypeString describes t for a manifest: named types by their full import
// path, and the exported fields of structs (with their tags) so that a
// field added, removed or retyped between builds shows up. Recursive types
// are described once.
func TypeString(t reflect.Type) string {
	var sb strings.Builder
	writeType(&sb, t, map[reflect.Type]bool{})
	return sb.String()
}

func writeType(sb *strings.Builder, t reflect.Type, seen map[reflect.Type]bool) {
	if t == nil {
		sb.WriteString("nil")
		return
	}
	if t.Name() != "" {
		if t.PkgPath() != "" {
			sb.WriteString(t.PkgPath())
			sb.WriteByte('.')
		}
		sb.WriteString(t.Name())
		if t.Kind() != reflect.Struct || seen[t] || t.PkgPath() == "" {
			return
		}
		seen[t] = true
		writeStruct(sb, t, seen)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		sb.WriteByte('*')
		writeType(sb, t.Elem(), seen)
	case reflect.Slice:
		sb.WriteString("[]")
		writeType(sb, t.Elem(), seen)
	case reflect.Array:
		sb.WriteString("[" + strconv.Itoa(t.Len()) + "]")
		writeType(sb, t.Elem(), seen)
	case reflect.Map:
		sb.WriteString("map[")
		writeType(sb, t.Key(), seen)
		sb.WriteByte(']')
		writeType(sb, t.Elem(), seen)
	case reflect.Chan:
		sb.WriteString(t.ChanDir().String() + " ")
		writeType(sb, t.Elem(), seen)
	case reflect.Struct:
		sb.WriteString("struct")
		writeStruct(sb, t, seen)
	default:
		sb.WriteString(t.String())
	}
}

func writeStruct(sb *strings.Builder, t reflect.Type, seen map[reflect.Type]bool) {
	sb.WriteByte('{')
	first := true
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		if !first {
			sb.WriteString("; ")
		}
		first = false
		sb.WriteString(f.Name)
		sb.WriteByte(' ')
		writeType(sb, f.Type, seen)
		if f.Tag != "" {
			sb.WriteString(" " + strconv.Quote(string(f.Tag)))
		}
	}
	sb.WriteByte('}')
}
