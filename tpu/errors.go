package tpu

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Sentinel errors. Every error this package returns wraps exactly one of
// them, so callers can branch with errors.Is and still show the full message,
// which names the offending input and lists what is valid.
var (
	// ErrUnknownGeneration reports a TPU generation name this package does
	// not know. The concrete error is a *GenerationError.
	ErrUnknownGeneration = errors.New("unknown generation")

	// ErrInvalidTopology reports a topology string that does not parse, or
	// that the generation does not offer. The concrete error is a
	// *TopologyError.
	ErrInvalidTopology = errors.New("invalid topology")

	// ErrInvalidChipsPerHost reports a chips-per-host override that no
	// real VM serving the topology has (see Generation.ValidChipsPerHost).
	ErrInvalidChipsPerHost = errors.New("invalid chips per host")

	// ErrInvalidPodType reports a malformed pod type such as "v6e" or
	// "v4-15" (v4 has 2 cores per chip, so its core count must be even).
	ErrInvalidPodType = errors.New("invalid pod type")

	// ErrInvalidArgument reports an out-of-range or empty argument to an
	// environment or label builder, such as a worker ID outside the slice or
	// a hostname list of the wrong length.
	ErrInvalidArgument = errors.New("invalid argument")
)

// GenerationError is the error returned for an unknown TPU generation. It
// wraps ErrUnknownGeneration.
//
// The zero value reports an empty generation name. A GenerationError is not
// modified after it is returned and is safe to share between goroutines.
type GenerationError struct {
	// Input is the generation name as the caller gave it.
	Input string
}

// Error lists the valid generations and the accepted spellings.
func (e *GenerationError) Error() string {
	names := make([]string, 0, len(generationOrder))
	for _, g := range generationOrder {
		names = append(names, string(g))
	}
	if strings.TrimSpace(e.Input) == "" {
		return fmt.Sprintf("the TPU generation is empty; valid: %s", strings.Join(names, ", "))
	}
	if hint := podTypeHint(e.Input); hint != "" {
		return hint
	}
	return fmt.Sprintf("unknown TPU generation %q; valid: %s "+
		"(also accepted: Ray names such as TPU-V6E and v5litepod, GKE names such as tpu7x, "+
		"and gke-tpu-accelerator values such as tpu-v6e-slice)",
		e.Input, strings.Join(names, ", "))
}

// podTypeHint explains a pod type ("v6e-16", gcloud's accelerator type
// and Ray's pod type) given where a generation belongs, naming the
// generation and the topologies of that many chips; "" if s is no pod
// type.
func podTypeHint(s string) string {
	g, chips, err := ParsePodType(s)
	if err != nil {
		return ""
	}
	var match []string
	for _, t := range g.ValidTopologies() {
		if t.Chips() == chips {
			match = append(match, string(g)+" "+t.String())
		}
	}
	msg := fmt.Sprintf("%q is a pod type (%d chips of %s), not a TPU generation", s, chips, g)
	switch len(match) {
	case 0:
		return msg + fmt.Sprintf("; the generation is %s, and no %s topology has %d chips", g, g, chips)
	case 1:
		return msg + "; did you mean " + match[0] + "?"
	default:
		return msg + "; did you mean " + strings.Join(match[:len(match)-1], ", ") + " or " + match[len(match)-1] + "?"
	}
}

// Unwrap returns ErrUnknownGeneration.
func (e *GenerationError) Unwrap() error { return ErrUnknownGeneration }

// TopologyError is the error returned for a topology that does not parse or
// that a generation does not offer. It wraps ErrInvalidTopology.
//
// Reason is set when the string itself is malformed; Generation and Valid are
// set when the topology was checked against a generation. A TopologyError is
// not modified after it is returned and is safe to share between goroutines.
type TopologyError struct {
	// Input is the topology: the string as given when it did not parse,
	// otherwise its canonical form (e.g. "4x5").
	Input string
	// Reason says why Input does not parse; "" when it parsed.
	Reason string
	// Generation is the generation Input was checked against, if any.
	Generation Generation
	// Valid lists the topologies Generation offers, smallest first.
	Valid []Topology
}

// Error names the input and why it is malformed or which topologies are
// valid, for example:
//
//	topology "4x5" is not valid for v6e; valid: 1x1, 2x2, 2x4, 2x8, 4x4, 4x8, 8x8, 8x16, 16x16
//	invalid topology "4x0": dimension 2 is "0"; want a positive integer no larger than 1024
func (e *TopologyError) Error() string {
	if e.Reason == "" {
		if t, err := ParseTopology(e.Input); err == nil && len(e.Valid) > 0 && !slices.ContainsFunc(e.Valid, func(v Topology) bool { return v.NumDims() == t.NumDims() }) {
			msg := fmt.Sprintf("topology %q is %s, but %s topologies are %s", e.Input, dimsWord(t.NumDims()), e.Generation, dimsWord(e.Valid[0].NumDims()))
			if len(e.Valid) > maxListed {
				return msg + fmt.Sprintf(", such as %s (%d in all; goray validate %s lists them)", joinTopologies(e.Valid[:6]), len(e.Valid), e.Generation)
			}
			return msg + ": " + joinTopologies(e.Valid)
		}
		if len(e.Valid) > maxListed {
			return fmt.Sprintf("topology %q is not valid for %s; valid: %s, … (%d in all; goray validate %s lists them)",
				e.Input, e.Generation, joinTopologies(e.Valid[:maxListed]), len(e.Valid), e.Generation)
		}
		return fmt.Sprintf("topology %q is not valid for %s; valid: %s",
			e.Input, e.Generation, joinTopologies(e.Valid))
	}
	msg := fmt.Sprintf("invalid topology %q: %s", e.Input, e.Reason)
	if e.Generation != "" {
		msg += fmt.Sprintf("; valid for %s: %s", e.Generation, joinTopologies(e.Valid))
	}
	return msg
}

// Unwrap returns ErrInvalidTopology.
func (e *TopologyError) Unwrap() error { return ErrInvalidTopology }

// maxListed is how many valid topologies an error lists before it says
// how many there are in all (v5p has over a hundred).
const maxListed = 24

func dimsWord(n int) string {
	switch n {
	case 2:
		return "two-dimensional"
	case 3:
		return "three-dimensional"
	}
	return fmt.Sprintf("%d-dimensional", n)
}
