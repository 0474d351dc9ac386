package kubernetes

import (
	"context"
	"crypto/tls"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/goray-dev/goray/worker"
)

// This file keeps the mutual-TLS certificates of a long-lived cluster
// handle fresh. The handle's CA is valid for caValidity and its key never
// leaves the driver's memory. The certificates it signs for the workers
// (in a Secret, read by new pods) and for the driver are valid for
// Worker.CertValidity and renewed at half their life: a new Secret
// generation "<secret>-<n>" (Secrets are immutable), which new pods take
// their credentials from, and a new driver certificate for new dials. Both
// ends verify each other against the CA only, so pods started from an
// older generation and the renewed driver keep working together.

// caValidity is how long a cluster handle's CA is valid: the longest a
// handle can keep starting worker pods.
const caValidity = 365 * 24 * time.Hour

// renewRetry is how soon a failed renewal is tried again.
const renewRetry = time.Minute

// issueCredentials issues fresh worker and driver certificates from the
// handle's CA and makes the driver's the one new dials present.
func (r *Runner) issueCredentials() (workerCreds, driverCreds worker.Credentials, _ error) {
	workerCreds, err := r.ca.IssueFor(worker.RoleWorker, r.cfg.Worker.CertValidity)
	if err != nil {
		return workerCreds, driverCreds, fmt.Errorf("issue the workers' TLS certificate: %w", err)
	}
	driverCreds, err = r.ca.IssueFor(worker.RoleDriver, r.cfg.Worker.CertValidity)
	if err != nil {
		return workerCreds, driverCreds, fmt.Errorf("issue the driver's TLS certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(driverCreds.Cert, driverCreds.Key)
	if err != nil {
		return workerCreds, driverCreds, fmt.Errorf("the driver's TLS certificate: %w", err)
	}
	r.driverCert.Store(&pair)
	return workerCreds, driverCreds, nil
}

// presentDriverCert makes cfg present the driver's current certificate.
func (r *Runner) presentDriverCert(cfg *tls.Config) {
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return r.driverCert.Load(), nil
	}
}

// renewLoop renews the certificates at half their validity until Close,
// retrying a failed renewal after renewRetry.
func (r *Runner) renewLoop() {
	next := r.cfg.Worker.CertValidity / 2
	for {
		t := time.NewTimer(next)
		select {
		case <-r.runCtx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := r.renewCredentials(r.runCtx); err != nil {
			if r.runCtx.Err() != nil {
				return
			}
			r.log.Warn("renew the workers' TLS certificates", "err", err, "retry in", renewRetry)
			next = min(renewRetry, r.cfg.Worker.CertValidity/8)
			continue
		}
		next = r.cfg.Worker.CertValidity / 2
	}
}

// renewCredentials issues new certificates into a new Secret generation
// that new pods read, and deletes the generation before the previous one
// (no pod starts from it any more: pods resolve their Secret references
// when they start).
func (r *Runner) renewCredentials(ctx context.Context) error {
	workerCreds, _, err := r.issueCredentials()
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.secretGen++
	name := fmt.Sprintf("%s-%d", r.pt.secret, r.secretGen)
	r.mu.Unlock()
	ns := r.cfg.Namespace
	s := newSecret(name, ns, r.pt.cluster, r.token, workerCreds)
	// Owned by the first Secret, so that collecting it collects them all.
	s.OwnerReferences = []metav1.OwnerReference{r.pt.owner}
	if _, err := r.client.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create Secret %s/%s: %w", ns, name, err)
	}
	r.pt.renewed.Store(&name)
	r.mu.Lock()
	r.secrets = append(r.secrets, name)
	var stale []string
	if len(r.secrets) > 2 {
		stale, r.secrets = r.secrets[:len(r.secrets)-2], r.secrets[len(r.secrets)-2:]
	}
	r.mu.Unlock()
	for _, old := range stale {
		if err := r.client.CoreV1().Secrets(ns).Delete(ctx, old, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			r.log.Warn("delete an old TLS Secret", "secret", old, "err", err)
		}
	}
	r.log.Debug("renewed the workers' TLS certificates", "secret", name)
	return nil
}

// deleteRenewedSecrets deletes the Secret generations renewal created.
func (r *Runner) deleteRenewedSecrets(ctx context.Context) {
	r.mu.Lock()
	names := r.secrets
	r.secrets = nil
	r.mu.Unlock()
	for _, name := range names {
		if err := r.client.CoreV1().Secrets(r.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			r.log.Warn("delete a renewed TLS Secret", "secret", name, "err", err)
		}
	}
}
