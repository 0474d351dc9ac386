package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/goray-dev/goray/backend"
)

// This file makes the ProvisioningRequest of ProvisionRequest mode: the
// cluster autoscaler's API for capacity granted all at once
// (autoscaling.x-k8s.io/v1, ProvisioningRequest; KEP "Provisioning Request
// CRD", kubernetes/autoscaler cluster-autoscaler/proposals). It is a CRD
// whose Go types live in a module the backend does not import, so the
// object is written and read as JSON through the clientset's REST client.

// provReq is the part of a ProvisioningRequest the backend writes and
// reads.
type provReq struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		ProvisioningClassName string `json:"provisioningClassName"`
		PodSets               []struct {
			PodTemplateRef struct {
				Name string `json:"name"`
			} `json:"podTemplateRef"`
			Count int32 `json:"count"`
		} `json:"podSets"`
	} `json:"spec"`
	Status struct {
		Conditions []metav1.Condition `json:"conditions,omitempty"`
	} `json:"status"`
}

const provReqGroupVersion = "autoscaling.x-k8s.io/v1"

func (s *Source) provReqPath(name string) string {
	p := "/apis/" + provReqGroupVersion + "/namespaces/" + s.ns + "/provisioningrequests"
	if name != "" {
		p += "/" + name
	}
	return p
}

// restClient is the clientset's REST client for API paths outside its
// typed groups, or nil (the client-go fake).
func (s *Source) restClient() rest.Interface {
	d := s.client.Discovery()
	if d == nil {
		return nil
	}
	rc := d.RESTClient()
	if rc == nil {
		return nil
	}
	if c, ok := rc.(*rest.RESTClient); ok && c == nil {
		return nil
	}
	return rc
}

// createRequest creates the PodTemplate of the capacity pods and one
// ProvisioningRequest for count of them, both named name.
func (pv *provisioning) createRequest(ctx context.Context, name string, count int) error {
	s := pv.s
	rc := s.restClient()
	if rc == nil {
		return backend.Errorf(backend.FailedPrecondition, pv.op, "Provision.Mode %q needs a client of a real API server (ProvisioningRequest is a CRD the client-go fake does not serve)", ProvisionRequest)
	}
	tmpl := s.capacityPod(pv.groups[0], 0, pv.shape)
	tmpl.Spec.Hostname, tmpl.Spec.Subdomain = "", "" // each pod's own
	pt := &corev1.PodTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelCluster: s.cluster, labelManagedBy: managedBy}},
		Template:   corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl.Labels}, Spec: tmpl.Spec},
	}
	if _, err := s.client.CoreV1().PodTemplates(s.ns).Create(ctx, pt, metav1.CreateOptions{}); err != nil {
		return backend.Wrap(apiCode(err), pv.op, fmt.Errorf("create PodTemplate %s: %w", name, err))
	}
	pv.provReq = name
	var pr provReq
	pr.APIVersion, pr.Kind = provReqGroupVersion, "ProvisioningRequest"
	pr.Metadata = metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelCluster: s.cluster, labelManagedBy: managedBy}}
	pr.Spec.ProvisioningClassName = s.prov.Class
	pr.Spec.PodSets = make([]struct {
		PodTemplateRef struct {
			Name string `json:"name"`
		} `json:"podTemplateRef"`
		Count int32 `json:"count"`
	}, 1)
	pr.Spec.PodSets[0].PodTemplateRef.Name = name
	pr.Spec.PodSets[0].Count = int32(count)
	body, err := json.Marshal(&pr)
	if err != nil {
		return backend.Errorf(backend.Internal, pv.op, "encode ProvisioningRequest: %w", err)
	}
	err = rc.Post().AbsPath(s.provReqPath("")).SetHeader("Content-Type", "application/json").Body(body).Do(ctx).Error()
	if err != nil {
		cerr := pv.deleteRequest(context.WithoutCancel(ctx))
		if apierrors.IsNotFound(err) {
			return backend.Errorf(backend.FailedPrecondition, pv.op, "create ProvisioningRequest %s: the cluster does not serve %s provisioningrequests (%w); the cluster autoscaler's CRD is needed (GKE has it from 1.28.3)", name, provReqGroupVersion, err)
		}
		return backend.Wrap(apiCode(err), pv.op, errors.Join(fmt.Errorf("create ProvisioningRequest %s: %w", name, err), cerr))
	}
	return nil
}

// deleteRequest deletes the ProvisioningRequest and its PodTemplate.
func (pv *provisioning) deleteRequest(ctx context.Context) error {
	s := pv.s
	var errs []error
	if rc := s.restClient(); rc != nil {
		err := rc.Delete().AbsPath(s.provReqPath(pv.provReq)).Do(ctx).Error()
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete ProvisioningRequest %s: %w", pv.provReq, err))
		}
	}
	err := s.client.CoreV1().PodTemplates(s.ns).Delete(ctx, pv.provReq, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("delete PodTemplate %s: %w", pv.provReq, err))
	}
	return errors.Join(errs...)
}

// requestStatus says how the ProvisioningRequest stands: its conditions
// (Accepted, Provisioned, Failed, ...) with their reasons and messages.
func (pv *provisioning) requestStatus(ctx context.Context) string {
	s := pv.s
	rc := s.restClient()
	if rc == nil {
		return "ProvisioningRequest " + pv.provReq + ": no client to read it"
	}
	raw, err := rc.Get().AbsPath(s.provReqPath(pv.provReq)).Do(ctx).Raw()
	if err != nil {
		return "ProvisioningRequest " + pv.provReq + ": " + err.Error()
	}
	var pr provReq
	if err := json.Unmarshal(raw, &pr); err != nil {
		return "ProvisioningRequest " + pv.provReq + ": " + err.Error()
	}
	if len(pr.Status.Conditions) == 0 {
		return "ProvisioningRequest " + pv.provReq + " (class " + pr.Spec.ProvisioningClassName + "): no conditions yet (is the cluster autoscaler serving this class?)"
	}
	var parts []string
	for _, c := range pr.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
	}
	return "ProvisioningRequest " + pv.provReq + ": " + strings.Join(parts, ", ")
}
