package worker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// This file holds the mutual TLS of the driver/worker connection: a
// per-cluster CA that a backend generates and keeps in memory, the
// certificates it issues to the driver and to the workers, and the
// tls.Configs of both ends.

// TLSServerName is the DNS name in every worker certificate a [CA]
// issues, and the name a driver's TLS config ([Credentials.ClientConfig])
// verifies. Workers are dialled by IP (a pod's IP is not known when its
// certificate is issued), so the name is fixed; what makes a worker
// trusted is that the cluster's CA signed its certificate.
const TLSServerName = "goray-worker"

// DefaultCertValidity is how long a [CA] and its certificates are valid
// when NewCA is given 0.
const DefaultCertValidity = 24 * time.Hour

// clockSkew backdates certificates, so that a peer whose clock is a
// little behind accepts them.
const clockSkew = 5 * time.Minute

// Role is what a certificate is for: serving as a worker or dialling as a
// driver. A worker certificate is valid only for server authentication
// and a driver certificate only for client authentication, so neither can
// stand in for the other.
type Role int

const (
	// RoleWorker certificates serve connections (TLS server, named
	// TLSServerName).
	RoleWorker Role = iota
	// RoleDriver certificates dial workers (TLS client).
	RoleDriver
)

func (r Role) String() string {
	switch r {
	case RoleWorker:
		return "worker"
	case RoleDriver:
		return "driver"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// CA is a per-cluster certificate authority: an ECDSA P-256 key and a
// self-signed certificate, valid for a short time, that signs the
// certificates of one cluster's driver and workers. A backend creates one
// per cluster handle and keeps it in memory; only its certificate (never
// its key) leaves the driver. A CA is safe for concurrent use.
type CA struct {
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	certPEM  []byte
	notAfter time.Time
}

// NewCA generates a CA named name (its common name, for example the
// cluster's ID), valid for validity from now (0 means
// DefaultCertValidity). It fails with an error naming validity when it is
// negative.
func NewCA(name string, validity time.Duration) (*CA, error) {
	switch {
	case validity == 0:
		validity = DefaultCertValidity
	case validity < 0:
		return nil, fmt.Errorf("CA validity %v: want a positive duration (0 means %v)", validity, DefaultCertValidity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "goray cluster CA " + name, Organization: []string{"goray"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, certPEM: pemBlock("CERTIFICATE", der), notAfter: tmpl.NotAfter}, nil
}

// serial is a random 128-bit certificate serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// CertPEM returns the CA's certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// NotAfter is when the CA and every certificate it issued expire.
func (ca *CA) NotAfter() time.Time { return ca.notAfter }

// Issue returns new credentials for role, signed by the CA and valid as
// long as the CA: a fresh ECDSA P-256 key and its certificate, with the
// CA's certificate.
func (ca *CA) Issue(role Role) (Credentials, error) { return ca.IssueFor(role, 0) }

// IssueFor is Issue with a certificate valid for validity from now, or
// until the CA expires if that is sooner; 0 means until the CA expires.
// Short-lived certificates renewed from a longer-lived CA keep working
// together: each end verifies the other against the CA only.
func (ca *CA) IssueFor(role Role, validity time.Duration) (Credentials, error) {
	if validity < 0 {
		return Credentials{}, fmt.Errorf("certificate validity %v: want a positive duration (0 means the CA's)", validity)
	}
	notAfter := ca.notAfter
	if end := time.Now().Add(validity); validity > 0 && end.Before(notAfter) {
		notAfter = end
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Credentials{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "goray-" + role.String(), Organization: []string{"goray"}},
		NotBefore:    time.Now().Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	switch role {
	case RoleWorker:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{TLSServerName}
	case RoleDriver:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	default:
		return Credentials{}, fmt.Errorf("issue a certificate for %v: want RoleWorker or RoleDriver", role)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Credentials{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Credentials{}, err
	}
	return Credentials{CA: ca.certPEM, Cert: pemBlock("CERTIFICATE", der), Key: pemBlock("EC PRIVATE KEY", kder)}, nil
}

// Credentials are what one end of a connection needs for mutual TLS, all
// PEM-encoded: the cluster CA's certificate (to verify the peer), and this
// end's certificate and private key.
type Credentials struct {
	CA, Cert, Key []byte
}

// The file names of credentials in a directory ([LoadCredentials]): the
// names of the keys of a Kubernetes TLS Secret, plus the CA.
const (
	FileCA   = "ca.crt"
	FileCert = "tls.crt"
	FileKey  = "tls.key"
)

// LoadCredentials reads credentials from dir: FileCA, FileCert and
// FileKey, such as a mounted Kubernetes Secret.
func LoadCredentials(dir string) (Credentials, error) {
	var c Credentials
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{FileCA, &c.CA}, {FileCert, &c.Cert}, {FileKey, &c.Key}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if err != nil {
			return Credentials{}, fmt.Errorf("TLS credentials: %w", err)
		}
		*f.dst = b
	}
	return c, nil
}

func (c Credentials) parse(role Role) (*x509.CertPool, tls.Certificate, error) {
	switch {
	case len(c.CA) == 0, len(c.Cert) == 0, len(c.Key) == 0:
		return nil, tls.Certificate{}, fmt.Errorf("%s TLS credentials: want the CA certificate, the certificate and the key, all PEM-encoded; missing %s",
			role, missing(map[string]bool{"CA": len(c.CA) == 0, "certificate": len(c.Cert) == 0, "key": len(c.Key) == 0}))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(c.CA) {
		return nil, tls.Certificate{}, fmt.Errorf("%s TLS credentials: the CA is not a PEM-encoded certificate", role)
	}
	pair, err := tls.X509KeyPair(c.Cert, c.Key)
	if err != nil {
		return nil, tls.Certificate{}, fmt.Errorf("%s TLS credentials: %w", role, err)
	}
	return pool, pair, nil
}

func missing(m map[string]bool) string {
	var s string
	for _, k := range []string{"CA", "certificate", "key"} {
		if m[k] {
			if s != "" {
				s += ", "
			}
			s += k
		}
	}
	return s
}

// ServerConfig is a worker's TLS config: it presents the worker's
// certificate and requires a driver certificate signed by the CA (mutual
// TLS), TLS 1.3 only. Set it as ServerOptions.TLS.
func (c Credentials) ServerConfig() (*tls.Config, error) {
	pool, pair, err := c.parse(RoleWorker)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		NextProtos:   []string{"http/1.1"},
	}, nil
}

// ClientConfig is a driver's TLS config: it presents the driver's
// certificate and accepts only a worker certificate signed by the CA for
// TLSServerName, TLS 1.3 only. Set it as ClientOptions.TLS.
func (c Credentials) ClientConfig() (*tls.Config, error) {
	pool, pair, err := c.parse(RoleDriver)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		RootCAs:      pool,
		ServerName:   TLSServerName,
		NextProtos:   []string{"http/1.1"},
	}, nil
}

// tlsRefusal reports whether err is a TLS failure that retrying does not
// fix: a certificate that does not verify (on either side), or a peer
// that does not speak TLS.
func tlsRefusal(err error) bool {
	var (
		verr  *tls.CertificateVerificationError
		alert tls.AlertError
		rh    tls.RecordHeaderError
		ua    x509.UnknownAuthorityError
		ci    x509.CertificateInvalidError
		hn    x509.HostnameError
		oe    *net.OpError
	)
	// An alert from the peer (it refused our certificate) comes as a
	// net.OpError "remote error" over TCP, as tls.AlertError over QUIC.
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return true
	}
	return errors.As(err, &verr) || errors.As(err, &alert) || errors.As(err, &rh) ||
		errors.As(err, &ua) || errors.As(err, &ci) || errors.As(err, &hn)
}
