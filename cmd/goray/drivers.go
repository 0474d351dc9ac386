package main

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/goray-dev/goray/backend/kubernetes"
	"github.com/goray-dev/goray/dashboard"
)

// kubeDrivers is goray status --kubeconfig: the drivers of a namespace,
// found from the holders of its goray slice Leases, each with the slices
// it holds, its pod, and its status summary read from the pod's IP on
// port (the driver's status endpoint).
func kubeDrivers(cmd *cobra.Command, cfg kubernetes.Config, port int, token string, timeout time.Duration) error {
	infos, err := kubernetes.InspectSlices(cmd.Context(), cfg)
	if err != nil {
		return err
	}
	held := map[string][]string{}
	for _, si := range infos {
		if si.Holder != "" {
			held[si.Holder] = append(held[si.Holder], si.Name)
		}
	}
	out := cmd.OutOrStdout()
	ns := cfg.Namespace
	if ns == "" {
		ns = "default"
	}
	if len(held) == 0 {
		fmt.Fprintf(out, "No driver holds a slice in namespace %s (no live goray slice Lease).\n", ns)
		return nil
	}
	var client k8s.Interface = kubeClient
	if client == nil {
		if client, err = kubernetes.NewClientset(cfg); err != nil {
			return err
		}
	}
	for _, holder := range slices.Sorted(func(yield func(string) bool) {
		for h := range held {
			if !yield(h) {
				return
			}
		}
	}) {
		fmt.Fprintf(out, "== driver %s: holds %s\n", holder, strings.Join(held[holder], ", "))
		pod := driverPod(holder)
		p, err := client.CoreV1().Pods(ns).Get(cmd.Context(), pod, metav1.GetOptions{})
		if err != nil {
			fmt.Fprintf(out, "   no pod %s in namespace %s (%v): the driver runs outside the cluster, or has gone; its Leases lapse unless renewed\n\n", pod, ns, err)
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			// Its IP is free for another pod: dialling it could read
			// someone else's status.
			fmt.Fprintf(out, "   pod %s has exited (%s): the driver is gone; its Leases lapse unless renewed\n\n", pod, p.Status.Phase)
			continue
		}
		if p.Status.PodIP == "" {
			fmt.Fprintf(out, "   pod %s is %s without an IP\n\n", pod, p.Status.Phase)
			continue
		}
		addr := net.JoinHostPort(p.Status.PodIP, strconv.Itoa(port))
		fmt.Fprintf(out, "   pod %s (%s), status endpoint %s\n", pod, p.Status.Phase, addr)
		v, err := (&dashboard.Client{Addr: addr, Token: token, HTTP: &http.Client{Timeout: timeout}}).View(cmd.Context())
		if err != nil {
			fmt.Fprintf(out, "   %v\n\n", err)
			continue
		}
		tw := tabwriter.NewWriter(out, 0, 4, 0, ' ', 0)
		var sb strings.Builder
		if err := dashboard.WriteStatus(&sb, v); err != nil {
			return err
		}
		for line := range strings.Lines(sb.String()) {
			fmt.Fprint(tw, "   "+line)
		}
		tw.Flush()
		fmt.Fprintln(out)
	}
	return nil
}

// driverPod is the pod name in a driver's Lease identity: the Kubernetes
// backend's default identity in a pod is "<ServiceAccount user>/<host
// name>-<random suffix>", and a pod's host name is its name.
func driverPod(identity string) string {
	name := identity[strings.LastIndexByte(identity, '/')+1:]
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		name = name[:i]
	}
	return name
}
