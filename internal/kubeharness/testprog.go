//go:build e2e

package kubeharness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// envTestProgram is set by the node agent for containers of
// ImageTestProgram.
const envTestProgram = "GORAY_KUBEHARNESS_TESTPROG"

// RunTestProgram makes a test binary usable as the ImageTestProgram image.
// Call it first in TestMain of every package whose pods use that image:
//
//	func TestMain(m *testing.M) {
//		kubeharness.RunTestProgram()
//		os.Exit(m.Run())
//	}
//
// In a process started by the node agent for ImageTestProgram it runs the
// container's args and exits; anywhere else it returns at once. Commands:
//
//	exit CODE          print a line, exit with CODE
//	sleep [DURATION]   sleep (default: until killed; SIGTERM ends it with 143)
//	serve [PORT [IP]]  HTTP on IP:PORT (default $POD_IP:8080), answering
//	                   "pod=$POD_NAME ip=$POD_IP"
//	resolve NAME [TIMEOUT]  look NAME up until it resolves (default 10s),
//	                   print "NAME -> ADDRS", exit 0; exit 1 at once when
//	                   the DNS says NAME does not exist, or on timeout
//	dial ADDR [TIMEOUT [stay]]  TCP dials of ADDR until one connects (exit
//	                   0, or with stay sleep until killed) or TIMEOUT
//	                   (default 2s) passes (exit 1, printing the error)
//	get URL [TIMEOUT]  GET URL until it answers 200 (default 30s), print the
//	                   body, exit 0; exit 1 on timeout
//	whoami             ask the API server who this pod is, with client-go's
//	                   in-cluster config (NetworkIsolated mounts the token),
//	                   and print "whoami: <user>"
//	env                print the environment, sorted
//	echo ARGS...       print ARGS
func RunTestProgram() {
	if os.Getenv(envTestProgram) != "1" {
		return
	}
	os.Exit(testProgram(os.Args[1:], os.Stdout))
}

func testProgram(args []string, out io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(out, "testprog: no command; want exit, sleep, serve, get, resolve, dial, whoami, env or echo")
		return 2
	}
	arg := func(i int, def string) string {
		if len(args) > i {
			return args[i]
		}
		return def
	}
	switch args[0] {
	case "exit":
		code, err := strconv.Atoi(arg(1, "0"))
		if err != nil {
			fmt.Fprintf(out, "testprog: exit %q: %v\n", arg(1, ""), err)
			return 2
		}
		fmt.Fprintf(out, "testprog: pod %s exiting with %d\n", os.Getenv("POD_NAME"), code)
		return code
	case "sleep":
		fmt.Fprintf(out, "testprog: pod %s sleeping\n", os.Getenv("POD_NAME"))
		if d, err := time.ParseDuration(arg(1, "")); err == nil {
			time.Sleep(d)
			return 0
		}
		select {}
	case "serve":
		addr := net.JoinHostPort(arg(2, os.Getenv("POD_IP")), arg(1, "8080"))
		body := fmt.Sprintf("pod=%s ip=%s\n", os.Getenv("POD_NAME"), os.Getenv("POD_IP"))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintf(out, "testprog: listen: %v\n", err)
			return 1
		}
		fmt.Fprintf(out, "testprog: serving on %s\n", l.Addr())
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(out, "testprog: request from %s\n", r.RemoteAddr)
			_, _ = io.WriteString(w, body)
		})}
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		go func() {
			<-sig
			_ = srv.Close()
		}()
		if err := srv.Serve(l); err != http.ErrServerClosed {
			fmt.Fprintf(out, "testprog: serve: %v\n", err)
			return 1
		}
		return 0
	case "get":
		timeout, err := time.ParseDuration(arg(2, "30s"))
		if err != nil {
			timeout = 30 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		// Dial from the pod's own IP, as a pod would.
		dialer := &net.Dialer{Timeout: 2 * time.Second}
		if ip := net.ParseIP(os.Getenv("POD_IP")); ip != nil {
			dialer.LocalAddr = &net.TCPAddr{IP: ip}
		}
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: dialer.DialContext}}
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, arg(1, ""), nil)
			resp, err := c.Do(req)
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					fmt.Fprintf(out, "testprog: GET %s from %s: %s", arg(1, ""), os.Getenv("POD_IP"), b)
					return 0
				}
				err = fmt.Errorf("status %s", resp.Status)
			}
			select {
			case <-ctx.Done():
				fmt.Fprintf(out, "testprog: GET %s: %v\n", arg(1, ""), err)
				return 1
			case <-time.After(100 * time.Millisecond):
			}
		}
	case "resolve":
		timeout, err := time.ParseDuration(arg(2, "10s"))
		if err != nil {
			timeout = 10 * time.Second
		}
		deadline := time.Now().Add(timeout)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			addrs, err := net.DefaultResolver.LookupHost(ctx, arg(1, ""))
			cancel()
			if err == nil {
				fmt.Fprintf(out, "testprog: %s -> %s\n", arg(1, ""), strings.Join(addrs, ","))
				return 0
			}
			// A name the cluster's DNS says does not exist is an answer:
			// only a failure to get one (a timeout, DNS not serving
			// yet) is tried again until the deadline.
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) && dnsErr.IsNotFound || time.Now().After(deadline) {
				fmt.Fprintf(out, "testprog: resolve %s: %v\n", arg(1, ""), err)
				return 1
			}
			time.Sleep(100 * time.Millisecond)
		}
	case "dial":
		timeout, err := time.ParseDuration(arg(2, "2s"))
		if err != nil {
			timeout = 2 * time.Second
		}
		deadline := time.Now().Add(timeout)
		var c net.Conn
		for {
			if c, err = net.DialTimeout("tcp", arg(1, ""), max(time.Until(deadline), 500*time.Millisecond)); err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(out, "testprog: dial %s: %v\n", arg(1, ""), err)
				return 1
			}
			time.Sleep(50 * time.Millisecond)
		}
		fmt.Fprintf(out, "testprog: dial %s: connected from %s\n", arg(1, ""), c.LocalAddr())
		_ = c.Close()
		if arg(3, "") == "stay" {
			select {}
		}
		return 0
	case "whoami":
		cfg, err := rest.InClusterConfig()
		if err != nil {
			fmt.Fprintf(out, "testprog: whoami: %v\n", err)
			return 1
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			fmt.Fprintf(out, "testprog: whoami: %v\n", err)
			return 1
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			fmt.Fprintf(out, "testprog: whoami: %v\n", err)
			return 1
		}
		fmt.Fprintf(out, "whoami: %s\n", r.Status.UserInfo.Username)
		return 0
	case "env":
		env := os.Environ()
		sort.Strings(env)
		for _, e := range env {
			fmt.Fprintln(out, e)
		}
		return 0
	case "echo":
		fmt.Fprintln(out, args[1:])
		return 0
	}
	fmt.Fprintf(out, "testprog: unknown command %q\n", args[0])
	return 2
}
