package kubernetes

import (
	"github.com/google/wire"
	"k8s.io/client-go/kubernetes"
)

// ClusterID names one cluster handle: the value of LabelCluster on every
// object it creates, and part of their names. NewClusterID makes a fresh
// one; two handles must not share one.
type ClusterID string

// NewClusterID returns a random ClusterID.
func NewClusterID() ClusterID { return ClusterID(randomSuffix()) }

// NewClientset returns cfg's Kubernetes client: cfg.Client, else one
// built from cfg.REST, else from the kubeconfig or the in-cluster config.
func NewClientset(cfg Config) (kubernetes.Interface, error) { return cfg.clientset() }

// Set builds the backend's parts for github.com/google/wire from
// a Config: the client, a fresh ClusterID, the slice Leases, the node
// Source and the pod Runner. Everything it does can be done by hand with
// the same constructors (see New).
var Set = wire.NewSet(NewClientset, NewClusterID, NewLeases, NewSource, NewRunner)
