// Package kubernetes runs goray on a Kubernetes cluster.
package kubernetes
