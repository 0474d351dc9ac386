package kubernetes

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The labels and annotations the backend puts on the objects it creates,
// so that everything of one cluster handle can be listed
// (`kubectl get pods,svc,secrets,leases -l goray.dev/cluster=<id>`) and
// garbage-collected (every object is owned by the cluster's Secret).
const (
	labelPrefix = "goray.dev/"
	// LabelCluster holds the cluster handle's ID on every object it made.
	LabelCluster = labelPrefix + "cluster"
	// LabelNode holds the Kubernetes node a worker pod is pinned to; the
	// runtime's nodes carry it too.
	LabelNode = labelPrefix + "node"
	// LabelName, on a Kubernetes node, names it in the runtime (its
	// Snapshot, KillNode, RuntimeInfo.Node) instead of the node's own
	// name, such as "solo" for a node the cluster calls
	// gke-pool-1-a2b3-solo.
	LabelName = labelPrefix + "name"
	// LabelReservation holds the reservation (placement group) ID of a
	// TPU worker pod; CPU worker pods have none.
	LabelReservation = labelPrefix + "reservation"
	// LabelSlice holds the slice (node pool) of a TPU worker pod or of a
	// slice Lease.
	LabelSlice = labelPrefix + "slice"
	// LabelWorkerID holds a TPU worker pod's TPU_WORKER_ID.
	LabelWorkerID = labelPrefix + "worker-id"
	// AnnotationSlice holds a Lease's slice name unshortened.
	AnnotationSlice = labelPrefix + "slice"
	// AnnotationWorkerEnv, on an adopted capacity pod (a worker pod in
	// waiting that became a reservation's), holds the env its worker got
	// in the handshake (TPU_WORKER_ID, TPU_WORKER_HOSTNAMES, ...), one
	// NAME=value per line in name order: the pod spec's env, immutable,
	// lacks it.
	AnnotationWorkerEnv = labelPrefix + "worker-env"
	// labelManagedBy is the well-known managed-by label.
	labelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "goray"
)

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsName turns parts into a DNS-1123 label (lower case, digits and
// dashes, at most 63 characters): long names keep a hash of the whole
// so that they stay unique.
func dnsName(parts ...string) string {
	s := notDNS.ReplaceAllString(strings.ToLower(strings.Join(parts, "-")), "-")
	s = strings.Trim(s, "-")
	if len(s) <= 63 {
		return s
	}
	return strings.Trim(s[:54], "-") + "-" + shortHash(s)
}

// labelValue makes s a valid label value the same way.
func labelValue(s string) string {
	if len(s) <= 63 && !notLabel.MatchString(s) && (s == "" || isAlnum(s[0]) && isAlnum(s[len(s)-1])) {
		return s
	}
	return dnsName(s)
}

var notLabel = regexp.MustCompile(`[^A-Za-z0-9._-]`)

func isAlnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

func parseQuantity(s string) (resource.Quantity, error) {
	if s == "" {
		return resource.Quantity{}, nil
	}
	return resource.ParseQuantity(s)
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}
