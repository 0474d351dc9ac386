package cluster

import "github.com/goray-dev/goray/backend"

// classCache remembers the class of the last request that had no node
// selector and no placement, with resources of at most maxCachedRes
// entries. Submissions come in runs of one shape (often the very same
// Resources map), and confirming that a request has the remembered
// resources costs a map lookup per entry, where classFor's full path
// iterates the map, validates and quantizes each amount, builds a key and
// hashes it.
//
// Two maps of the same length agree on every key of one are equal, so the
// check is exact whatever map the request carries.
type classCache struct {
	n   int // entries in res
	res [maxCachedRes]struct {
		k string
		v float64
	}
	c *class
}

const maxCachedRes = 4

// lookup returns the cached class if s is the remembered shape and the
// class is still in use (not swept).
func (cc *classCache) lookup(s *backend.Scheduling) *class {
	if cc.c == nil || cc.c.swept || len(s.NodeSelector) > 0 || s.Placement.Group != 0 || len(s.Resources) != cc.n {
		return nil
	}
	for i := range cc.n {
		e := &cc.res[i]
		if v, ok := s.Resources[e.k]; !ok || v != e.v {
			return nil
		}
	}
	return cc.c
}

// remember caches c as the class of s, when s is a shape the cache holds.
func (cc *classCache) remember(s *backend.Scheduling, c *class) {
	cc.c = nil
	if len(s.NodeSelector) > 0 || s.Placement.Group != 0 || len(s.Resources) > maxCachedRes {
		return
	}
	cc.n = 0
	for k, v := range s.Resources {
		cc.res[cc.n].k, cc.res[cc.n].v = k, v
		cc.n++
	}
	cc.c = c
}
