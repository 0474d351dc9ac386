package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The environment with which a backend launches a worker process. A
// process is a worker when EnvAddr is set; [ServeLaunched] reads the
// variables and removes them from the environment, so that processes the
// worker's user code starts do not inherit them.
const (
	// EnvAddr is the address to listen on (host:port; port 0 picks one).
	// The worker listens on that address only.
	EnvAddr = "GORAY_WORKER_ADDR"
	// EnvTokenFD is an inherited file descriptor, the read end of a pipe
	// that carries the token drivers must present; the worker reads it to
	// the end and closes it. [StartProcess] uses it: unlike EnvToken, the
	// token never appears in /proc/<pid>/environ.
	EnvTokenFD = "GORAY_WORKER_TOKEN_FD"
	// EnvTokenFile names a file holding the token (surrounding white
	// space is ignored), such as a mounted Kubernetes Secret; it should be
	// readable by the worker's user only.
	EnvTokenFile = "GORAY_WORKER_TOKEN_FILE"
	// EnvToken is the token itself, for launchers that can do neither.
	// It stays readable in /proc/<pid>/environ to the worker's user for
	// the process's life, so prefer EnvTokenFD or EnvTokenFile. Exactly
	// one of the three is required.
	EnvToken = "GORAY_WORKER_TOKEN"
	// EnvTLSDir names a directory holding the worker's TLS credentials
	// (FileCA, FileCert, FileKey; a mounted Kubernetes Secret works). When
	// it, or the three EnvTLS* variables below, are set the worker serves
	// mutual TLS only ([Credentials.ServerConfig]); otherwise plain TCP.
	EnvTLSDir = "GORAY_WORKER_TLS_DIR"
	// EnvTLSCA, EnvTLSCert and EnvTLSKey are the worker's TLS credentials
	// themselves, PEM-encoded (a Kubernetes secretKeyRef puts them there
	// without a literal in the pod spec): the cluster CA's certificate and
	// the worker's certificate and key. Like EnvToken, the key stays in
	// /proc/<pid>/environ for the worker's user; EnvTLSDir avoids that.
	EnvTLSCA   = "GORAY_WORKER_TLS_CA"
	EnvTLSCert = "GORAY_WORKER_TLS_CERT"
	EnvTLSKey  = "GORAY_WORKER_TLS_KEY"
	// EnvReadyFD, if set, is an inherited file descriptor on which the
	// worker writes "goray-worker ready <addr>\n" once it listens, then
	// closes it. It is how a launcher learns a port chosen by the kernel.
	EnvReadyFD = "GORAY_WORKER_READY_FD"
	// EnvLifelineFD, if set, is an inherited file descriptor, the read end
	// of a pipe whose write end only the launcher holds. When it reads EOF
	// the launcher has died (or let go), and the worker exits at once.
	EnvLifelineFD = "GORAY_WORKER_LIFELINE_FD"
	// EnvMaxMessageSize bounds one message, in bytes; default
	// DefaultMaxMessageSize.
	EnvMaxMessageSize = "GORAY_WORKER_MAX_MESSAGE_SIZE"
	// EnvIdleTimeout is how long the worker waits without any driver
	// connected before it exits, as a Go duration; default
	// DefaultIdleTimeout.
	EnvIdleTimeout = "GORAY_WORKER_IDLE_TIMEOUT"
	// EnvLogLevel is the level of the worker's logs on its stderr: debug,
	// info, warn (the default), error or off.
	EnvLogLevel = "GORAY_WORKER_LOG_LEVEL"
)

// DefaultIdleTimeout is how long a launched worker waits for a driver.
const DefaultIdleTimeout = 30 * time.Second

// exitGrace bounds how long a launched worker waits for running user code
// to honour its cancelled context before it exits anyway.
const exitGrace = 2 * time.Second

const readyPrefix = "goray-worker ready "

// Launched reports whether a backend launched this process as a worker.
// It only reads one environment variable.
func Launched() bool { return os.Getenv(EnvAddr) != "" }

// listenHost is the host a launched worker listens on (from EnvAddr).
var listenHost atomic.Pointer[string]

// Host returns the host this process listens on as a launched worker (the
// host of EnvAddr, such as its pod's IP on Kubernetes), the address its
// driver reaches it by, or "" when this process is not a launched worker.
// A server that work in a worker starts for its driver (serve.Process's)
// listens there so that the driver can reach it.
func Host() string {
	if h := listenHost.Load(); h != nil {
		return *h
	}
	return ""
}

// ServeLaunched serves reg as a worker configured by the environment above
// and returns the process's exit code once the worker is done: 0 when its
// driver went away (lifeline closed, or no driver for the idle timeout),
// 2 when the environment is invalid or the address cannot be listened on.
// Errors go to stderr. Package ray's Main calls it; programs do not.
func ServeLaunched(reg Registry) int {
	env := map[string]string{}
	for _, k := range []string{EnvAddr, EnvToken, EnvTokenFD, EnvTokenFile, EnvTLSDir, EnvTLSCA, EnvTLSCert, EnvTLSKey, EnvReadyFD, EnvLifelineFD, EnvMaxMessageSize, EnvIdleTimeout, EnvLogLevel, EnvOutputTee} {
		env[k] = os.Getenv(k)
		os.Unsetenv(k)
	}
	if host, _, err := net.SplitHostPort(env[EnvAddr]); err == nil {
		listenHost.Store(&host)
	}
	log, err := stderrLogger(env[EnvLogLevel])
	if err == nil {
		err = serveLaunched(reg, env, log)
	}
	switch {
	case err == nil, errors.Is(err, ErrNoDriver), errors.Is(err, errDriverGone):
		if err != nil {
			log.Info("goray worker: exiting", "reason", err)
		}
		return 0
	default:
		fmt.Fprintf(os.Stderr, "goray worker: %v\n", err)
		return 2
	}
}

var errDriverGone = errors.New("the launching driver process is gone (lifeline closed)")

func stderrLogger(level string) (*slog.Logger, error) {
	var l slog.Level
	switch strings.ToLower(level) {
	case "", "warn":
		l = slog.LevelWarn
	case "debug":
		l = slog.LevelDebug
	case "info":
		l = slog.LevelInfo
	case "error":
		l = slog.LevelError
	case "off":
		return slog.New(slog.DiscardHandler), nil
	default:
		return nil, fmt.Errorf("%s=%q: want debug, info, warn, error or off", EnvLogLevel, level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l})).With("pid", os.Getpid()), nil
}

// maxTokenSize bounds a token read from a pipe or file.
const maxTokenSize = 4 << 10

// launchedToken reads the token from the one of EnvTokenFD, EnvTokenFile
// and EnvToken that is set.
func launchedToken(env map[string]string) (string, error) {
	set := 0
	for _, k := range []string{EnvTokenFD, EnvTokenFile, EnvToken} {
		if env[k] != "" {
			set++
		}
	}
	if set > 1 {
		return "", fmt.Errorf("set one of %s, %s and %s, not several", EnvTokenFD, EnvTokenFile, EnvToken)
	}
	var r io.Reader
	switch {
	case env[EnvTokenFD] != "":
		f, err := inheritedFile(env, EnvTokenFD)
		if err != nil {
			return "", err
		}
		defer f.Close()
		r = f
	case env[EnvTokenFile] != "":
		f, err := os.Open(env[EnvTokenFile])
		if err != nil {
			return "", fmt.Errorf("%s: %w", EnvTokenFile, err)
		}
		defer f.Close()
		r = f
	default:
		return env[EnvToken], nil
	}
	b, err := io.ReadAll(io.LimitReader(r, maxTokenSize+1))
	if err != nil {
		return "", fmt.Errorf("read the token: %w", err)
	}
	if len(b) > maxTokenSize {
		return "", fmt.Errorf("token longer than %d bytes", maxTokenSize)
	}
	return strings.TrimSpace(string(b)), nil
}

func serveLaunched(reg Registry, env map[string]string, log *slog.Logger) error {
	token, err := launchedToken(env)
	if err != nil {
		return err
	}
	tlsConfig, err := launchedTLS(env)
	if err != nil {
		return err
	}
	opts := &ServerOptions{Token: token, TLS: tlsConfig, IdleTimeout: DefaultIdleTimeout, Logger: log,
		OnForceCancel: func(string) { os.Exit(ExitForceCancel) }, OnEnv: setProcessEnv}
	if s := env[EnvMaxMessageSize]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%s=%q: %v", EnvMaxMessageSize, s, err)
		}
		opts.MaxMessageSize = n
	}
	if s := env[EnvIdleTimeout]; s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s=%q: want a positive duration such as 30s", EnvIdleTimeout, s)
		}
		opts.IdleTimeout = d
	}
	srv, err := NewServer(reg, opts)
	if err != nil {
		return err
	}
	ready, err := inheritedFile(env, EnvReadyFD)
	if err != nil {
		return err
	}
	lifeline, err := inheritedFile(env, EnvLifelineFD)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", env[EnvAddr])
	if err != nil {
		return err
	}
	if ready != nil {
		_, err := fmt.Fprintf(ready, "%s%s\n", readyPrefix, ln.Addr())
		ready.Close()
		if err != nil {
			ln.Close()
			return fmt.Errorf("report readiness: %w", err)
		}
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	if lifeline != nil {
		go func() {
			io.Copy(io.Discard, lifeline) //nolint:errcheck // any end means the launcher is gone
			cancel(errDriverGone)
		}()
	}
	stopOutput, err := captureOutput(srv, env[EnvOutputTee] == "1")
	if err != nil {
		log.Warn("goray worker: the output of its code is not forwarded to drivers", "err", err)
	} else {
		defer stopOutput()
	}
	log.Info("goray worker: serving", "addr", ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		// Give running work a moment to honour its cancelled context.
		select {
		case err = <-served:
		case <-time.After(exitGrace):
		}
	}
	if c := context.Cause(ctx); c != nil && (err == nil || errors.Is(err, context.Canceled)) {
		err = c
	}
	return err
}

// launchedTLS is the worker's TLS config from EnvTLSDir or the three
// EnvTLS* variables, or nil when none is set.
func launchedTLS(env map[string]string) (*tls.Config, error) {
	var creds Credentials
	pem := env[EnvTLSCA] != "" || env[EnvTLSCert] != "" || env[EnvTLSKey] != ""
	switch {
	case env[EnvTLSDir] != "" && pem:
		return nil, fmt.Errorf("set %s or %s, %s and %s, not both", EnvTLSDir, EnvTLSCA, EnvTLSCert, EnvTLSKey)
	case env[EnvTLSDir] != "":
		c, err := LoadCredentials(env[EnvTLSDir])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvTLSDir, err)
		}
		creds = c
	case pem:
		creds = Credentials{CA: []byte(env[EnvTLSCA]), Cert: []byte(env[EnvTLSCert]), Key: []byte(env[EnvTLSKey])}
	default:
		return nil, nil
	}
	cfg, err := creds.ServerConfig()
	if err != nil && pem {
		return nil, fmt.Errorf("%s, %s and %s: %w", EnvTLSCA, EnvTLSCert, EnvTLSKey, err)
	}
	return cfg, err
}

func inheritedFile(env map[string]string, key string) (*os.File, error) {
	s := env[key]
	if s == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(s)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: want an inherited file descriptor (3 or more)", key, s)
	}
	f := os.NewFile(uintptr(fd), key)
	if f == nil {
		return nil, fmt.Errorf("%s=%d: not a valid file descriptor", key, fd)
	}
	return f, nil
}

// setProcessEnv sets a driver's ClientOptions.Env in the launched worker's
// process env; the worker's own variables (GORAY_WORKER_*, read and unset
// at start) are refused, as a name that is not a valid variable name.
func setProcessEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("invalid variable %q", k)
		}
		if strings.HasPrefix(k, "GORAY_WORKER_") {
			return fmt.Errorf("variable %q is the worker's own, set when it starts", k)
		}
	}
	for k, v := range env {
		if err := os.Setenv(k, v); err != nil {
			return fmt.Errorf("set %s: %w", k, err)
		}
	}
	return nil
}
