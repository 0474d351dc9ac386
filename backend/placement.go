package backend

import "fmt"

// MaxBundles is the most bundles a placement group may have. A larger group
// is refused with InvalidArgument before a backend does any work for it, so
// that no request makes a scheduler hold its lock for long. (TPU slice
// reservations build their bundles from the cluster's own hosts and are not
// bound by it.)
const MaxBundles = 10_000

// Validate checks a placement group spec as every backend does: a known
// strategy, 1 to [MaxBundles] bundles, each reserving some valid resource
// amount (see [Resources.Validate]) with a valid label selector. It returns
// an InvalidArgument error whose operation is op (and the bundle index).
// Its cost is proportional to the spec's size, so backends call it before
// taking any lock.
func (s *PlacementGroupSpec) Validate(op string) error {
	if s == nil {
		return Errorf(InvalidArgument, op, "nil placement group spec")
	}
	if !s.Strategy.Valid() {
		return Errorf(InvalidArgument, op, "unknown strategy %d; valid: PACK, SPREAD, STRICT_PACK, STRICT_SPREAD", int(s.Strategy))
	}
	if len(s.Bundles) == 0 {
		return Errorf(InvalidArgument, op, "a placement group needs at least one bundle")
	}
	if len(s.Bundles) > MaxBundles {
		return Errorf(InvalidArgument, op, "%d bundles: a placement group may have at most %d (backend.MaxBundles)", len(s.Bundles), MaxBundles)
	}
	for i, bu := range s.Bundles {
		// The bundle's operation name is made only for an error.
		bop := func() string { return fmt.Sprintf("%s: bundle %d", op, i) }
		// One pass for the usual valid bundle; Validate words an error.
		valid, some := true, false
		for k, v := range bu.Resources {
			if k == "" || !ValidAmount(v) {
				valid = false
				break
			}
			some = some || v != 0
		}
		if !valid {
			if err := bu.Resources.Validate(); err != nil {
				return Reop(InvalidArgument, bop(), err)
			}
		}
		if !some && !reservesSome(bu.Resources) {
			return Errorf(InvalidArgument, bop(), "empty bundle: a bundle must reserve some resource")
		}
		if err := bu.LabelSelector.Validate(); err != nil {
			return Reop(InvalidArgument, bop(), err)
		}
	}
	return nil
}

// reservesSome reports whether r names a resource (Resources.Names is not
// empty), without making the list.
func reservesSome(r Resources) bool {
	for k, v := range r {
		if v != 0 || k == "" {
			return true
		}
	}
	return false
}
