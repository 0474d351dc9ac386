package kubernetes

import (
	"strings"
	"testing"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestOwnImage: a driver in a pod with no Worker.Image uses its own pod's
// image; a pod it cannot find, or no pod name at all, is an error saying
// to set Worker.Image.
func TestOwnImage(t *testing.T) {
	is := is.New(t)
	client := newFakeClient(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app-xyz", Namespace: "ml"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "driver", Image: "us-docker.pkg.dev/p/goray:v1"}, {Name: "sidecar", Image: "proxy"}}},
	})
	cfg := Config{Namespace: "ml"}

	t.Setenv("POD_NAME", "")
	t.Setenv("HOSTNAME", "app-xyz")
	img, err := OwnImage(t.Context(), client, cfg)
	is.NoErr(err)
	is.Equal(img, "us-docker.pkg.dev/p/goray:v1") // the first container's, found by hostname

	t.Setenv("POD_NAME", "other")
	_, err = OwnImage(t.Context(), client, cfg)
	is.True(err != nil && strings.Contains(err.Error(), "pod ml/other could not be read") && strings.Contains(err.Error(), "set Worker.Image"))

	t.Setenv("POD_NAME", "")
	t.Setenv("HOSTNAME", "")
	_, err = OwnImage(t.Context(), client, cfg)
	is.True(err != nil && strings.Contains(err.Error(), "neither $POD_NAME nor $HOSTNAME"))
}
