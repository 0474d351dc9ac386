package tpu

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// SliceShape is the shape of one TPU slice: its generation, its chip grid
// and how many chips each host (VM) holds. Build one with NewSliceShape,
// which validates it and resolves the default chips per host.
//
// A SliceShape is a comparable value and safe for concurrent use. The zero
// value is invalid: Validate fails and the other methods return zero values
// ("" or 0). A literal with ChipsPerHost 0 uses the generation default
// (Generation.DefaultChipsPerHost); methods on a literal that Validate rejects
// return unspecified values.
type SliceShape struct {
	// Generation is the TPU generation, one of the constants such as V6e.
	Generation Generation
	// Topology is the chip grid; Generation must offer it.
	Topology Topology
	// ChipsPerHost is the number of chips on each host (VM): one of
	// Generation.ValidChipsPerHost(Topology), the chips of a real machine
	// type serving the topology. 0 means
	// Generation.DefaultChipsPerHost(Topology).
	ChipsPerHost int
}

// hostGrid returns the chip grid of one host holding chipsPerHost chips, in
// libtpu's TPU_CHIPS_PER_HOST_BOUNDS order (GKE device plugin values).
func hostGrid(chipsPerHost int) ([3]int, bool) {
	switch chipsPerHost {
	case 1:
		return [3]int{1, 1, 1}, true
	case 2:
		return [3]int{1, 2, 1}, true
	case 4:
		return [3]int{2, 2, 1}, true
	case 8:
		return [3]int{2, 4, 1}, true
	}
	return [3]int{}, false
}

// tiles reports whether a grid of per-host chip grids covers t exactly.
func tiles(t Topology, grid [3]int) bool {
	b := t.bounds3()
	for i := range b {
		if b[i]%grid[i] != 0 {
			return false
		}
	}
	return true
}

// NewSliceShape returns the validated shape of a slice of generation g with
// the given topology (parsed with g.ParseTopology, so " 4X4 " works).
//
// chipsPerHost 0 picks the default (Generation.DefaultChipsPerHost): every
// chip on one host for the v5e/v6e single-host topologies 1x1, 2x2 and 2x4,
// otherwise 4. A non-zero chipsPerHost overrides it; this is Ray's
// chips_per_vm, needed for ambiguous shapes such as v6e 2x4, which GKE serves
// either as one 8-chip VM (the default) or as two 4-chip VMs (chipsPerHost
// 4). The override must be 1, 2, 4 or 8 and its per-host chip grid (see
// SliceShape.ChipsPerHostBounds) must tile the topology.
//
// g may be any spelling ParseGeneration accepts, such as Generation("TPU-V6E");
// the result holds the canonical constant. Errors wrap ErrUnknownGeneration,
// ErrInvalidTopology or ErrInvalidChipsPerHost.
func NewSliceShape(g Generation, topology string, chipsPerHost int) (SliceShape, error) {
	gen, err := ParseGeneration(string(g))
	if err != nil {
		return SliceShape{}, err
	}
	t, err := gen.ParseTopology(topology)
	if err != nil {
		return SliceShape{}, err
	}
	s := SliceShape{Generation: gen, Topology: t, ChipsPerHost: chipsPerHost}
	if chipsPerHost == 0 {
		s.ChipsPerHost = gen.DefaultChipsPerHost(t)
	}
	if err := s.checkChipsPerHost(); err != nil {
		return SliceShape{}, err
	}
	return s, nil
}

// Validate reports whether s describes a real slice: a known generation, a
// topology it offers, and chips per host (after defaulting 0) that a real
// VM serving the topology holds. Errors are those of NewSliceShape.
func (s SliceShape) Validate() error {
	if err := s.Generation.ValidateTopology(s.Topology); err != nil {
		return err
	}
	return s.checkChipsPerHost()
}

// checkChipsPerHost validates the resolved chips per host against the
// machine types that serve the topology.
func (s SliceShape) checkChipsPerHost() error {
	cph := s.chipsPerHost()
	if servesChips(s.Generation, s.Topology, cph) {
		return nil
	}
	valid := s.Generation.ValidChipsPerHost(s.Topology)
	names := make([]string, 0, len(valid))
	for _, n := range valid {
		name := strconv.Itoa(n)
		if m := (SliceShape{Generation: s.Generation, Topology: s.Topology, ChipsPerHost: n}).MachineType(); m.Name != "" {
			name += " (" + m.Name + ")"
		}
		names = append(names, name)
	}
	if cph <= 0 {
		return fmt.Errorf("%w %d for %s %s: want a positive chip count; valid: %s",
			ErrInvalidChipsPerHost, cph, s.Generation, s.Topology, strings.Join(names, ", "))
	}
	if len(names) == 0 {
		return fmt.Errorf("%w %d for %s %s: no %s VM serves this topology",
			ErrInvalidChipsPerHost, cph, s.Generation, s.Topology, s.Generation)
	}
	return fmt.Errorf("%w %d for %s %s: no %d-chip %s VM serves it; valid: %s",
		ErrInvalidChipsPerHost, cph, s.Generation, s.Topology, cph, s.Generation, strings.Join(names, ", "))
}

// chipsPerHost resolves ChipsPerHost 0 to the generation default.
func (s SliceShape) chipsPerHost() int {
	if s.ChipsPerHost != 0 {
		return s.ChipsPerHost
	}
	return s.Generation.DefaultChipsPerHost(s.Topology)
}

// Chips returns the number of chips in the slice, such as 16 for v6e 4x4.
func (s SliceShape) Chips() int { return s.Topology.Chips() }

// Hosts returns the number of hosts (VMs, and so Kubernetes pods and Ray
// nodes) in the slice: max(1, chips / chips per host). For example v6e 4x4
// has 4 hosts, v6e 2x4 has 1 (or 2 with ChipsPerHost 4), v4 2x2x2 has 2. It
// returns 0 for the zero value.
func (s SliceShape) Hosts() int {
	chips, cph := s.Chips(), s.chipsPerHost()
	if chips == 0 || cph <= 0 {
		return 0
	}
	return max(1, chips/cph)
}

// MultiHost reports whether the slice spans more than one host, in which
// case Ray reserves it through the TPU-<pod type>-head resource and GKE
// provisions it as its own node pool.
func (s SliceShape) MultiHost() bool { return s.Hosts() > 1 }

// PodType returns Ray's pod type: <Ray version>-<chips × cores per chip>,
// such as "v6e-16" (v6e 4x4), "v4-16" (v4 2x2x2), "v5litepod-16" (v5e 4x4)
// or "v7x-16" (v7x 2x2x2). It is the value of the ray.io/tpu-pod-type label.
// It returns "" for the zero value.
func (s SliceShape) PodType() string {
	return s.podType(s.Generation.RayVersion())
}

// GKEPodType returns the pod type the GKE TPU device plugin writes into
// TPU_ACCELERATOR_TYPE. It equals PodType except for v7x, which GKE names
// "tpu7x" ("tpu7x-16" for v7x 2x2x2).
func (s SliceShape) GKEPodType() string {
	return s.podType(generationTable[s.Generation].gkePod)
}

// podType joins a generation prefix with the slice's core count.
func (s SliceShape) podType(prefix string) string {
	cores := s.Chips() * s.Generation.CoresPerChip()
	if prefix == "" || cores == 0 {
		return ""
	}
	return prefix + "-" + strconv.Itoa(cores)
}

// HeadResource returns the Ray resource that only worker 0 of a multi-host
// slice carries, "TPU-<pod type>-head" (such as "TPU-v6e-16-head"); holding
// it reserves the whole slice. It returns "" for the zero value.
func (s SliceShape) HeadResource() string {
	pod := s.PodType()
	if pod == "" {
		return ""
	}
	return "TPU-" + pod + "-head"
}

// AcceleratorType returns Ray's accelerator type for the slice's generation,
// such as "TPU-V6E".
func (s SliceShape) AcceleratorType() string { return s.Generation.AcceleratorType() }

// ChipsPerHostBounds returns the TPU_CHIPS_PER_HOST_BOUNDS value, the chip
// grid of one host as "x,y,z": 1 chip → "1,1,1", 2 → "1,2,1", 4 → "2,2,1",
// 8 → "2,4,1". It returns "" for an invalid chips per host.
func (s SliceShape) ChipsPerHostBounds() string {
	grid, ok := hostGrid(s.chipsPerHost())
	if !ok {
		return ""
	}
	return joinBounds(grid)
}

// HostBounds returns the TPU_HOST_BOUNDS value, the grid of hosts as
// "x,y,z": the topology (2D padded with z=1) divided axis by axis by the
// per-host chip grid. For example v6e 4x4 with 4 chips per host is "2,2,1"
// and v4 2x2x2 is "1,1,2". It returns "" for the zero value or a chips per
// host whose grid does not tile the topology.
func (s SliceShape) HostBounds() string {
	grid, ok := hostGrid(s.chipsPerHost())
	if !ok || s.Topology.IsZero() || !tiles(s.Topology, grid) {
		return ""
	}
	b := s.Topology.bounds3()
	for i := range b {
		b[i] /= grid[i]
	}
	return joinBounds(b)
}

// joinBounds renders a bounds triple as "x,y,z".
func joinBounds(b [3]int) string {
	return fmt.Sprintf("%d,%d,%d", b[0], b[1], b[2])
}

// String returns the generation and topology, such as "v6e 4x4". When
// ChipsPerHost overrides the default it is appended: "v6e 2x4 (4 chips per
// host)". It returns "" for the zero value.
func (s SliceShape) String() string {
	if s == (SliceShape{}) {
		return ""
	}
	str := s.Generation.String() + " " + s.Topology.String()
	if s.ChipsPerHost != 0 && s.ChipsPerHost != s.Generation.DefaultChipsPerHost(s.Topology) {
		unit := "chips"
		if s.ChipsPerHost == 1 {
			unit = "chip"
		}
		str += fmt.Sprintf(" (%d %s per host)", s.ChipsPerHost, unit)
	}
	return str
}

// podTypePattern is Ray's pod-type pattern ^(v|tpu)\d+[a-zA-Z]*-\d+$ after
// lower-casing and rewriting a "tpu-?v?" prefix to "v".
var podTypePattern = regexp.MustCompile(`^(v[0-9]+[a-z]*)-([0-9]+)$`)

// ParsePodType splits a pod type such as "v6e-16", "v5litepod-16",
// "tpu7x-16" or "TPU-V6E-16" into its generation and its number of chips.
// The number in a pod type counts cores, so chips = cores / cores per chip:
// "v6e-16" is 16 chips, "v4-16" and "tpu7x-16" are 8.
//
// It accepts what Ray's ^(v|tpu)\d+[a-zA-Z]*-\d+$ accepts (ignoring case and
// surrounding space, and rewriting a "tpu-?v?" prefix to "v" as Ray does).
// Errors wrap ErrInvalidPodType, and also ErrUnknownGeneration when only the
// generation is unknown.
func ParsePodType(s string) (g Generation, chips int, err error) {
	norm := normalizeVersionPrefix(strings.ToLower(strings.TrimSpace(s)))
	m := podTypePattern.FindStringSubmatch(norm)
	if m == nil {
		return "", 0, fmt.Errorf(`%w %q: want <generation>-<cores> such as "v6e-16" or "tpu7x-16"`, ErrInvalidPodType, s)
	}
	g, err = ParseGeneration(m[1])
	if err != nil {
		return "", 0, fmt.Errorf("%w %q: %w", ErrInvalidPodType, s, err)
	}
	cores, err := strconv.Atoi(m[2])
	cpc := g.CoresPerChip()
	if err != nil || cores <= 0 || cores%cpc != 0 {
		want := "positive"
		if cpc > 1 {
			want = fmt.Sprintf("a positive multiple of %d (%s has %d cores per chip)", cpc, g, cpc)
		}
		return "", 0, fmt.Errorf("%w %q: the core count must be %s", ErrInvalidPodType, s, want)
	}
	return g, cores / cpc, nil
}

// WorkerOfChip returns the worker ID (host index, as in TPU_WORKER_ID) of the
// host that holds the chip at coordinates (x, y, z) of the slice's chip grid
// (z is 0 for 2D topologies). Hosts are numbered x-fastest over the host
// grid of HostBounds. It returns -1 for coordinates outside the topology or
// an invalid shape.
func (s SliceShape) WorkerOfChip(x, y, z int) int {
	grid, ok := hostGrid(s.chipsPerHost())
	if !ok || s.Topology.IsZero() || !tiles(s.Topology, grid) {
		return -1
	}
	b := s.Topology.bounds3()
	if x < 0 || y < 0 || z < 0 || x >= b[0] || y >= b[1] || z >= b[2] {
		return -1
	}
	hb := [3]int{b[0] / grid[0], b[1] / grid[1], b[2] / grid[2]}
	return x/grid[0] + (y/grid[1])*hb[0] + (z/grid[2])*hb[0]*hb[1]
}
