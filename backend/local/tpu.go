package local

// TPUSliceSpec adds simulated GKE TPU node pools: Count slices of one
// generation and topology, each its own node pool, every host labelled as
// GKE and the TPU webhook would.
type TPUSliceSpec struct {
	// Generation is the TPU generation, e.g. "v6e".
	Generation string `json:"generation"`
	// Topology is the chip grid, e.g. "4x4".
	Topology string `json:"topology"`
	// Count is the number of slices; 0 means 1.
	Count int `json:"count,omitempty"`
	// ChipsPerHost overrides the default chips per host (ambiguous shapes
	// such as v6e 2x4).
	ChipsPerHost int `json:"chipsPerHost,omitempty"`
	// NamePrefix prefixes slice names; default "<generation>-<topology>".
	NamePrefix string `json:"namePrefix,omitempty"`
}

func expandSlices(specs []TPUSliceSpec) ([]nodeDef, error) {
	return nil, nil
}

// sliceIndex tracks TPU slices of the cluster.
type sliceIndex struct{}

func buildSliceIndex(b *Backend) *sliceIndex { return &sliceIndex{} }
func (b *Backend) releaseSlices(pg *pgroup)  {}
func (b *Backend) markSliceHostDown(n *node) {}
func (b *Backend) markSliceHostUp(n *node)   {}
