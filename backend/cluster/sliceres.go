package cluster

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/goray-dev/goray/backend"
)

// Ray gives every host of a TPU slice a resource named after the slice
// (<TPU_NAME>: 1, tpu.HostResources), so a fleet of S slices has S such
// names, each held by one slice's hosts only. Kept as columns of the
// dense per-node vectors, they would cost every node a column per slice:
// nodes × slices in memory, and a walk over every node for each new slice.
//
// Instead all slice names share one column, sliceCol: a host's amount of
// its own slice's name sits there, and a demand naming slice X puts its
// amount there too and carries X in its nodeMatcher, which admits only
// hosts of X. Since a host is in one slice, "X's amount on this host" and
// "the slice column of a host of X" are the same number, so fitting,
// taking and releasing work unchanged. A name counts as a slice name once
// a host of that slice reports it (first use wins: a name some other node
// reported as an ordinary resource before stays an ordinary column).
const sliceCol = 3 // after CPU, memory and TPU (New)

// sliceColName stands for the slice column where no slice is known (the
// largest amounts over several nodes, in errors). It is not a valid
// resource name to look up: resIndex maps slice names to sliceCol, never
// this.
const sliceColName = "<the host's TPU slice name>"

// nodeMatcher is what a demand asks of a node besides amounts: its label
// selector and, when the demand names a TPU slice's resource, membership
// of that slice.
type nodeMatcher struct {
	backend.Matcher
	slice string
}

// matches reports whether n satisfies the selector and is a host of the
// slice, if one is named.
func (m nodeMatcher) matches(n *node) bool {
	return (m.slice == "" || n.slice == m.slice) && m.Matcher.Matches(n.labels)
}

// within reports whether work of demand matcher m may use a bundle whose
// own matcher is bu: a demand naming a slice needs a bundle that reserved
// that slice's resource, since the bundle's slice column holds only it.
func (m nodeMatcher) within(bu nodeMatcher) bool {
	return m.slice == "" || m.slice == bu.slice
}

// isSliceName reports whether name is a TPU slice's resource. b.mu must be
// held.
func (rt *Runtime) isSliceName(name string) bool {
	i, ok := rt.resIndex[name]
	return ok && i == sliceCol
}

// demandSlice returns the TPU slice whose resource r asks for, or "", and
// an Infeasible error when it asks for two (no host is in two slices).
// b.mu must be held.
func (rt *Runtime) demandSlice(op string, r backend.Resources) (string, error) {
	slice := ""
	for k, v := range r {
		if v == 0 || !rt.isSliceName(k) {
			continue
		}
		if slice != "" && slice != k {
			a, b := min(slice, k), max(slice, k)
			return "", backend.Errorf(backend.Infeasible, op, "resources %s name two TPU slices, %q and %q; a host is in one slice, so ask for one slice's resource per task, actor or bundle", r, a, b)
		}
		slice = k
	}
	return slice, nil
}

// nodeVector is n's capacity vector for resources r as the source reported
// them; it registers r's names. The node's own slice name goes to
// sliceCol; another slice's name on it is left out with a warning (its
// column is that slice's). b.mu must be held.
func (rt *Runtime) nodeVector(n *node, r backend.Resources, names []string) []int64 {
	own := ""
	if n.spec.TPU != nil {
		own = n.spec.TPU.Slice
	}
	for _, k := range names {
		if k == own {
			if _, ok := rt.resIndex[k]; !ok {
				rt.resIndex[k] = sliceCol
			}
			if rt.isSliceName(k) {
				n.slice = k
			}
			continue
		}
		rt.addResourceName(k)
	}
	v := make([]int64, len(rt.resNames))
	for _, k := range names {
		i := rt.resIndex[k]
		if i == sliceCol && k != n.slice {
			rt.log.Warn("cluster: node resource left out: it is the name of another TPU slice, whose hosts alone hold it",
				"node", n.name, "resource", k, slog.Float64("amount", r[k]))
			continue
		}
		v[i] = backend.Quantize(r[k])
	}
	return v
}

// resourcesOf converts a vector to resources, naming the slice column
// after slice (a node's own slice, or the slice a demand names); with no
// slice, an amount there is shown as sliceColName.
func (rt *Runtime) resourcesOf(v []int64, slice string) backend.Resources {
	r := backend.Resources{}
	for i, q := range v {
		if q == 0 {
			continue
		}
		name := rt.resNames[i]
		if i == sliceCol {
			name = sliceColName
			if slice != "" {
				name = slice
			}
		}
		r[name] = backend.Dequantize(q)
	}
	return r
}

// sliceNamesPhrase summarises the slice names live nodes hold, for the
// list of the cluster's resources in errors: a fleet can have thousands.
// b.mu must be held.
func (rt *Runtime) sliceNamesPhrase() string {
	seen := map[string]bool{}
	first := ""
	for _, n := range rt.nodes {
		if n.slice == "" || n.capac[sliceCol] == 0 || seen[n.slice] {
			continue
		}
		seen[n.slice] = true
		if first == "" || n.slice < first {
			first = n.slice
		}
	}
	switch len(seen) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("the name of its TPU slice %q", first)
	default:
		return fmt.Sprintf("the names of its %d TPU slices (such as %q)", len(seen), first)
	}
}

// refuseSliceNames is the InvalidArgument error of a slice reservation
// whose bundle resources name a TPU slice's resource: the reservation
// picks its slices itself. b.mu must be held.
func (rt *Runtime) refuseSliceNames(op string, r backend.Resources) error {
	var named []string
	for k, v := range r {
		if v != 0 && rt.isSliceName(k) {
			named = append(named, k)
		}
	}
	if len(named) == 0 {
		return nil
	}
	slices.Sort(named)
	return backend.Errorf(backend.InvalidArgument, op, "bundle resources %s name the TPU slice resource %s; a slice reservation picks its slices by shape, so its bundles cannot name one (to run work on a named slice, ask for its resource on the task or actor: ray.Resources{%q: 1})",
		r, strings.Join(quoteAll(named), ", "), named[0])
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%q", x)
	}
	return out
}
