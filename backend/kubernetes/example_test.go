package kubernetes_test

import (
	"fmt"

	"github.com/goray-dev/goray/backend/kubernetes"
)

// Validate names every wrong field and what is valid.
func ExampleConfig_Validate() {
	cfg := kubernetes.Config{
		Namespace: "ML",
		Worker:    kubernetes.WorkerConfig{Port: 70000},
		CPUPool:   kubernetes.CPUPool{Min: 4, Max: 2},
	}
	fmt.Println(cfg.Validate())
	// Output:
	// configure Kubernetes backend: Namespace "ML": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')
	// Worker.Image is empty: name the image of your program (whose main calls ray.Main first), such as one built by ko; only a driver running in a pod may leave it empty (it then uses its own pod's image)
	// Worker.Port 70000: want 1..65535 (0 means 7077)
	// CPUPool.Min 4, Max 2: want 0 <= Min <= Max (Max 0 means 16)
}

// LeaseName is the Lease that claims a slice (one GKE node pool).
func ExampleLeaseName() {
	fmt.Println(kubernetes.LeaseName("v6e-4x4-a"))
	// Output: goray-slice-v6e-4x4-a
}
