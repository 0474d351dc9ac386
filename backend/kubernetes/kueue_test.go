package kubernetes

import (
	"testing"

	"github.com/matryer/is"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestKueueFlavorsOfNodes: a slice's nodes get the flavors whose node
// labels they carry, and a reservation's pods ask for exactly those
// labels (In, or DoesNotExist where the nodes have none), so that Kueue
// cannot assign them a flavor of other nodes.
func TestKueueFlavorsOfNodes(t *testing.T) {
	is := is.New(t)
	q := &kueueQueue{lq: "team", cq: "tpu", flavors: []kueueFlavor{
		{name: "spot", labels: map[string]string{"cloud.google.com/gke-spot": "true"}, max: 16},
		{name: "on-demand", labels: map[string]string{"cloud.google.com/gke-provisioning": "standard"}, max: 8},
	}}
	is.Equal(q.labelKeys(), []string{"cloud.google.com/gke-provisioning", "cloud.google.com/gke-spot"})
	od := q.flavorsOf(map[string]string{"cloud.google.com/gke-provisioning": "standard", "x": "y"})
	is.Equal(len(od), 1)
	is.Equal(od[0].name, "on-demand")
	is.Equal(len(q.flavorsOf(map[string]string{"x": "y"})), 0) // no flavor: Infeasible

	g := &kueueGroup{q: q, name: "goray-c1-1", affinity: [][]corev1.NodeSelectorRequirement{{
		{Key: "cloud.google.com/gke-provisioning", Operator: corev1.NodeSelectorOpIn, Values: []string{"standard"}},
		{Key: "cloud.google.com/gke-spot", Operator: corev1.NodeSelectorOpDoesNotExist},
	}}}
	pt := podTemplate{cfg: testConfig().withDefaults(), cluster: "c1", secret: "s", service: "s"}
	p := pt.pod(podSpec{name: "w0", node: "slice-a-0", chips: 4, hostname: "r1-s0-w0"})
	g.kueuePod(p, 0, 2, "low")
	is.Equal(p.Labels[labelKueueQueue], "team")
	is.Equal(p.Labels[labelKueueGroup], "goray-c1-1")
	is.Equal(p.Labels[labelKueuePriority], "low")
	is.Equal(p.Annotations[annotationKueueCount], "2")
	is.Equal(p.Annotations[annotationKueueRetry], "false")
	term := p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
	is.Equal(term.MatchFields[0].Values, []string{"slice-a-0"}) // still pinned to its node
	is.Equal(len(term.MatchExpressions), 2)
	is.Equal(term.MatchExpressions[1].Operator, corev1.NodeSelectorOpDoesNotExist)
}

// TestKueueCohortLends: without a borrowing limit, a ClusterQueue of a
// cohort may borrow what the cohort's others lend (their lending limit, or
// their nominal quota).
func TestKueueCohortLends(t *testing.T) {
	is := is.New(t)
	cq := func(nominal string, lending *resource.Quantity) kueueObject {
		var o kueueObject
		g := kueueResourceGroup{CoveredResources: []string{"google.com/tpu"}}
		g.Flavors = append(g.Flavors, struct {
			Name      string          `json:"name"`
			Resources []kueueResource `json:"resources"`
		}{Name: "on-demand", Resources: []kueueResource{{Name: "google.com/tpu", NominalQuota: resource.MustParse(nominal), LendingLimit: lending}}})
		o.Spec.ResourceGroups = []kueueResourceGroup{g}
		return o
	}
	four := resource.MustParse("4")
	is.Equal(lentBy([]kueueObject{cq("16", nil), cq("32", &four)}, "on-demand"), int64(20))
	is.Equal(lentBy([]kueueObject{cq("16", nil)}, "spot"), int64(0))
}
