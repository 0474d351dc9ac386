package worker

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/backend"
)

// testCreds issues the credentials of role from ca.
func testCreds(t testing.TB, ca *CA, role Role) Credentials {
	t.Helper()
	c, err := ca.Issue(role)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func serverTLS(t testing.TB, c Credentials) *tls.Config {
	t.Helper()
	cfg, err := c.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func clientTLS(t testing.TB, c Credentials) *tls.Config {
	t.Helper()
	cfg, err := c.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newTestCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestMutualTLS(t *testing.T) {
	ca, other := newTestCA(t, "cluster"), newTestCA(t, "other")
	workerCreds := testCreds(t, ca, RoleWorker)
	addr, _ := startServer(t, &ServerOptions{TLS: serverTLS(t, workerCreds)})
	plainAddr, _ := startServer(t, nil)
	otherAddr, _ := startServer(t, &ServerOptions{TLS: serverTLS(t, testCreds(t, other, RoleWorker))})
	// A driver certificate cannot serve as a worker's (client auth only).
	swappedAddr, _ := startServer(t, &ServerOptions{TLS: serverTLS(t, testCreds(t, ca, RoleDriver))})
	driver := clientTLS(t, testCreds(t, ca, RoleDriver))

	t.Run("HappyPath", func(t *testing.T) {
		is := is.New(t)
		c := dialTest(t, addr, &ClientOptions{TLS: driver})
		echoWorks(t, c)
		is.Equal(c.Addr(), addr)
	})
	refused := []struct {
		name, addr string
		tls        *tls.Config
		want       string
	}{
		{"WorkerOfAnotherCA", otherAddr, driver, "certificate signed by unknown authority"},
		{"WorkerWithDriverCertificate", swappedAddr, driver, "certificate"},
		{"DriverOfAnotherCA", addr, clientTLS(t, testCreds(t, other, RoleDriver)), "TLS"},
		{"DriverWithWorkerCertificate", addr, clientTLS(t, workerCreds), "TLS"},
		{"DriverWithoutCertificate", addr, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: driver.RootCAs, ServerName: TLSServerName}, "TLS"},
		{"PlaintextDriver", addr, nil, "the worker requires TLS"},
		{"PlaintextWorker", plainAddr, driver, "TLS"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := Dial(ctx, tt.addr, &ClientOptions{Token: testToken, Manifest: fakeManifest, TLS: tt.tls})
			if err == nil {
				c.Close()
			}
			is.True(err != nil)                                       // refused
			is.Equal(backend.CodeOf(err), backend.FailedPrecondition) // final: no retry fixes it
			is.True(strings.Contains(err.Error(), tt.want))           // names the problem
		})
	}
	t.Run("StillServes", func(t *testing.T) {
		echoWorks(t, dialTest(t, addr, &ClientOptions{TLS: driver}))
	})
}

// TestRenewedCertificates: certificates issued later by the same CA work
// with earlier ones in both directions (what a backend that renews its
// short-lived certificates relies on), and IssueFor never outlives the CA.
func TestRenewedCertificates(t *testing.T) {
	ca := newTestCA(t, "cluster")
	issue := func(t *testing.T, role Role, d time.Duration) Credentials {
		t.Helper()
		c, err := ca.IssueFor(role, d)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	oldWorker, _ := startServer(t, &ServerOptions{TLS: serverTLS(t, issue(t, RoleWorker, time.Minute))})
	newWorker, _ := startServer(t, &ServerOptions{TLS: serverTLS(t, issue(t, RoleWorker, time.Minute))})
	oldDriver := clientTLS(t, issue(t, RoleDriver, time.Minute))
	newDriver := clientTLS(t, issue(t, RoleDriver, time.Minute))
	for _, tt := range []struct {
		name   string
		addr   string
		driver *tls.Config
	}{{"old driver, new worker", newWorker, oldDriver}, {"new driver, old worker", oldWorker, newDriver}} {
		t.Run(tt.name, func(t *testing.T) { echoWorks(t, dialTest(t, tt.addr, &ClientOptions{TLS: tt.driver})) })
	}
	t.Run("capped by the CA", func(t *testing.T) {
		is := is.New(t)
		c := issue(t, RoleWorker, 100*time.Hour)
		_, pair, err := c.parse(RoleWorker)
		is.NoErr(err)
		is.True(!pair.Leaf.NotAfter.After(ca.NotAfter()))
		_, err = ca.IssueFor(RoleWorker, -time.Second)
		is.True(err != nil)
	})
}

func TestCredentials(t *testing.T) {
	ca := newTestCA(t, "c")
	good := testCreds(t, ca, RoleWorker)
	tests := []struct {
		name    string
		creds   Credentials
		wantErr string
	}{
		{"ok", good, ""},
		{"no key", Credentials{CA: good.CA, Cert: good.Cert}, "missing key"},
		{"nothing", Credentials{}, "missing CA, certificate, key"},
		{"bad CA", Credentials{CA: []byte("nope"), Cert: good.Cert, Key: good.Key}, "not a PEM-encoded certificate"},
		{"mismatched key", Credentials{CA: good.CA, Cert: good.Cert, Key: testCreds(t, ca, RoleWorker).Key}, "private key does not match"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			_, err := tt.creds.ServerConfig()
			if tt.wantErr == "" {
				is.NoErr(err)
				return
			}
			is.True(err != nil && strings.Contains(err.Error(), tt.wantErr)) // names what is wrong
		})
	}
	t.Run("BadValidity", func(t *testing.T) {
		is := is.New(t)
		_, err := NewCA("x", -time.Second)
		is.True(err != nil && strings.Contains(err.Error(), "want a positive duration"))
	})
	t.Run("ShortLived", func(t *testing.T) {
		is := is.New(t)
		ca, err := NewCA("x", 0)
		is.NoErr(err)
		is.True(time.Until(ca.NotAfter()) <= DefaultCertValidity)
	})
}

func TestLaunchedTLS(t *testing.T) {
	ca := newTestCA(t, "c")
	creds := testCreds(t, ca, RoleWorker)
	dir := t.TempDir()
	for name, b := range map[string][]byte{FileCA: creds.CA, FileCert: creds.Cert, FileKey: creds.Key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pemEnv := map[string]string{EnvTLSCA: string(creds.CA), EnvTLSCert: string(creds.Cert), EnvTLSKey: string(creds.Key)}
	tests := []struct {
		name    string
		env     map[string]string
		want    bool
		wantErr string
	}{
		{"none", map[string]string{}, false, ""},
		{"dir", map[string]string{EnvTLSDir: dir}, true, ""},
		{"pem", pemEnv, true, ""},
		{"both", map[string]string{EnvTLSDir: dir, EnvTLSCA: "x"}, false, "not both"},
		{"partial", map[string]string{EnvTLSCA: string(creds.CA)}, false, "missing certificate, key"},
		{"missing dir", map[string]string{EnvTLSDir: filepath.Join(dir, "nope")}, false, EnvTLSDir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			is := is.New(t)
			cfg, err := launchedTLS(tt.env)
			if tt.wantErr != "" {
				is.True(err != nil && strings.Contains(err.Error(), tt.wantErr)) // names what is wrong
				return
			}
			is.NoErr(err)
			is.Equal(cfg != nil, tt.want)
		})
	}
}

// TestCloseFromOnLost: Close called in the client's own OnLost returns
// (it used to wait for the reader goroutine, which was running OnLost).
func TestCloseFromOnLost(t *testing.T) {
	is := is.New(t)
	srv, err := NewServer(fakeRegistry{}, &ServerOptions{Token: testToken})
	is.NoErr(err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	is.NoErr(err)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() { stop(); <-served }()

	clients := make(chan *Client, 1)
	closed := make(chan error, 1)
	// Not dialTest: its cleanup's Close would hang on the deadlock this
	// test looks for.
	c, err := Dial(ctx, ln.Addr().String(), &ClientOptions{Token: testToken, Manifest: fakeManifest, OnLost: func(error) {
		closed <- (<-clients).Close()
	}})
	is.NoErr(err)
	clients <- c
	stop() // the worker goes away: the connection is lost
	select {
	case err := <-closed:
		is.NoErr(err)
	case <-time.After(30 * time.Second):
		t.Fatal("Close called from OnLost did not return (deadlock)")
	}
	<-c.Done()
	is.NoErr(c.Close()) // idempotent
	_, err = c.RunTask(context.Background(), "echo", backend.Value{}, nil)
	is.Equal(backend.CodeOf(err), backend.Unavailable) // the loss, not ErrClosed
}

// BenchmarkDial: the cost of mutual TLS on connecting to a worker
// (handshake included), against plain TCP in the same run.
func BenchmarkDial(b *testing.B) {
	ca := newTestCA(b, "bench")
	for _, bc := range []struct {
		name     string
		srv, cli *tls.Config
	}{
		{"plain", nil, nil},
		{"mTLS", serverTLS(b, testCreds(b, ca, RoleWorker)), clientTLS(b, testCreds(b, ca, RoleDriver))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			addr, _ := startServer(b, &ServerOptions{TLS: bc.srv})
			opts := &ClientOptions{Token: testToken, Manifest: fakeManifest, TLS: bc.cli}
			for b.Loop() {
				c, err := Dial(context.Background(), addr, opts)
				if err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
		})
	}
}

// A driver of another CA is refused with FailedPrecondition also when its
// hello is large: the worker's TLS 1.3 alert comes after the client's
// handshake has completed, so the driver may first see its request fail
// to write (broken pipe, reset) rather than the alert.
func TestDriverOfAnotherCALargeHello(t *testing.T) {
	ca, other := newTestCA(t, "cluster"), newTestCA(t, "other")
	addr, _ := startServer(t, &ServerOptions{TLS: serverTLS(t, testCreds(t, ca, RoleWorker))})
	big := Manifest{Codec: "raw"}
	for i := range 60000 {
		big.Entries = append(big.Entries, Entry{Kind: KindTask, Name: fmt.Sprintf("task-%06d", i), Signature: "func(string) string"})
	}
	for range 20 {
		is := is.New(t)
		// A hang detector: a dial with a 3 MB hello takes 2-4 s under
		// -race at load 15, and more at 20.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cli := clientTLS(t, testCreds(t, other, RoleDriver))
		cli.RootCAs = clientTLS(t, testCreds(t, ca, RoleDriver)).RootCAs // only the worker can refuse
		c, err := Dial(ctx, addr, &ClientOptions{Token: testToken, Manifest: big, TLS: cli})
		cancel()
		if err == nil {
			c.Close()
		}
		is.True(err != nil)
		is.Equal(backend.CodeOf(err), backend.FailedPrecondition) // final, as for a small hello
	}
}

// A worker that refuses the driver's certificate and resets the connection
// while the driver is still writing its hello: the driver's write fails
// (connection reset, broken pipe) with the worker's TLS alert already
// received; Dial reads the alert and fails with FailedPrecondition, not
// with the write's error as Unavailable (which the driver would retry).
func TestDriverOfAnotherCAResetMidHello(t *testing.T) {
	ca, other := newTestCA(t, "cluster"), newTestCA(t, "other")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := serverTLS(t, testCreds(t, ca, RoleWorker))
	done := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		herr := tls.Server(c, cfg).Handshake() // sends the alert: another CA
		c.(*net.TCPConn).SetLinger(0)          //nolint:errcheck // close with a reset, the hello unread
		c.Close()
		done <- herr
	}()
	big := Manifest{Codec: "raw"}
	for i := range 60000 {
		big.Entries = append(big.Entries, Entry{Kind: KindTask, Name: fmt.Sprintf("task-%06d", i), Signature: "func(string) string"})
	}
	is := is.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang detector, as above
	defer cancel()
	// The driver trusts the cluster's CA but holds a certificate of
	// another: only the worker can refuse, after the driver's side of the
	// TLS 1.3 handshake is done and its hello is on the way.
	cli := clientTLS(t, testCreds(t, other, RoleDriver))
	cli.RootCAs = clientTLS(t, testCreds(t, ca, RoleDriver)).RootCAs
	_, err = Dial(ctx, ln.Addr().String(), &ClientOptions{Token: testToken, Manifest: big, TLS: cli})
	t.Log(err)
	is.True(<-done != nil) // the worker side refused the certificate
	is.Equal(backend.CodeOf(err), backend.FailedPrecondition)
	is.True(strings.Contains(err.Error(), "certificate"))
}
