package serve_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/matryer/is"

	"github.com/goray-dev/goray/ray"
	"github.com/goray-dev/goray/serve"
)

// Every error of package serve carries a code of the closed set (issue 42
// item 6), and a wrong Deployment names the one field that is wrong.
func TestErrorCodes(t *testing.T) {
	c := newSingleHostCluster(t, 1)
	srv := serve.New(c, nil)
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	valid := func() serve.Deployment {
		return serve.Deployment{Name: "ok", Replica: echoReplica("x"), Accelerator: "v6e", Topology: "2x2"}
	}
	fields := []struct {
		field string
		edit  func(*serve.Deployment)
	}{
		{"Name", func(d *serve.Deployment) { d.Name = "no spaces" }},
		{"Name", func(d *serve.Deployment) { d.Name = "" }},
		{"Replica", func(d *serve.Deployment) { d.Replica = nil }},
		{"Replica", func(d *serve.Deployment) { d.Replica = serve.Process(serve.ProcessSpec{}) }},
		{"Accelerator", func(d *serve.Deployment) { d.Accelerator = "" }},
		{"Accelerator", func(d *serve.Deployment) { d.Accelerator = "v99" }},
		{"Topology", func(d *serve.Deployment) { d.Topology = "" }},
		{"Topology", func(d *serve.Deployment) { d.Topology = "3x7" }},
		{"ChipsPerVM", func(d *serve.Deployment) { d.ChipsPerVM = -1 }},
		{"ChipsPerVM", func(d *serve.Deployment) { d.Topology, d.ChipsPerVM = "2x4", 3 }},
		{"MinReplicas", func(d *serve.Deployment) { d.MinReplicas = -1 }},
		{"MaxReplicas", func(d *serve.Deployment) { d.MaxReplicas = -1 }},
		{"MaxReplicas", func(d *serve.Deployment) { d.MinReplicas, d.MaxReplicas = 3, 2 }},
		{"MaxConcurrentRequests", func(d *serve.Deployment) { d.MaxConcurrentRequests = -2 }},
		{"MaxRetries", func(d *serve.Deployment) { d.MaxRetries = -1 }},
		{"RequestTimeout", func(d *serve.Deployment) { d.RequestTimeout = -time.Second }},
		{"DrainTimeout", func(d *serve.Deployment) { d.DrainTimeout = -time.Second }},
		{"ChipsPerReplica", func(d *serve.Deployment) { d.ChipsPerReplica = -1 }},
		{"ChipsPerReplica", func(d *serve.Deployment) { d.ChipsPerReplica = 3 }},
		{"ChipsPerReplica", func(d *serve.Deployment) { d.Topology, d.ChipsPerReplica = "4x4", 1 }},
		{"Autoscaling.TargetOngoingRequests", func(d *serve.Deployment) {
			d.Autoscaling = &serve.Autoscaling{TargetOngoingRequests: -1}
		}},
		{"Autoscaling.UpscaleDelay", func(d *serve.Deployment) { d.Autoscaling = &serve.Autoscaling{UpscaleDelay: -1} }},
		{"Autoscaling.DownscaleDelay", func(d *serve.Deployment) { d.Autoscaling = &serve.Autoscaling{DownscaleDelay: -1} }},
		{"Autoscaling.Interval", func(d *serve.Deployment) { d.Autoscaling = &serve.Autoscaling{Interval: -1} }},
		{"Health.Period", func(d *serve.Deployment) { d.Health = &serve.HealthCheck{Period: -1} }},
		{"Health.Timeout", func(d *serve.Deployment) { d.Health = &serve.HealthCheck{Timeout: -1} }},
		{"Health.FailureThreshold", func(d *serve.Deployment) { d.Health = &serve.HealthCheck{FailureThreshold: -1} }},
		{"RollingUpdate.MaxSurge", func(d *serve.Deployment) { d.RollingUpdate = &serve.RollingUpdate{MaxSurge: -1} }},
		{"RollingUpdate.MaxUnavailable", func(d *serve.Deployment) {
			d.RollingUpdate = &serve.RollingUpdate{MaxSurge: 1, MaxUnavailable: -1}
		}},
		{"RollingUpdate", func(d *serve.Deployment) { d.RollingUpdate = &serve.RollingUpdate{} }},
	}
	all := []string{"Name", "Replica", "Accelerator", "Topology", "ChipsPerVM", "MinReplicas", "MaxReplicas", "MaxConcurrentRequests",
		"MaxRetries", "RequestTimeout", "DrainTimeout", "ChipsPerReplica", "TargetOngoingRequests", "UpscaleDelay", "DownscaleDelay",
		"Interval", "Period", "Health.Timeout", "FailureThreshold", "RollingUpdate.MaxSurge", "RollingUpdate.MaxUnavailable"}
	for _, f := range fields {
		t.Run("Deployment."+f.field, func(t *testing.T) {
			is := is.New(t)
			d := valid()
			f.edit(&d)
			err := srv.Deploy(context.Background(), d)
			t.Log(err)
			is.True(err != nil)
			is.Equal(ray.CodeOf(err), ray.InvalidArgument)
			is.True(errors.Is(err, ray.ErrInvalidArgument))
			var fe *serve.FieldError
			is.True(errors.As(err, &fe))
			is.Equal(fe.Field, f.field)
			is.True(strings.Contains(err.Error(), "Deployment."+f.field+": "))
			for _, other := range all { // the one field, no other
				if !strings.Contains(f.field, other) && !strings.Contains(other, f.field) && other != "Health.Timeout" {
					is.True(!strings.Contains(err.Error(), "Deployment."+other))
				}
			}
		})
	}

	is := is.New(t)
	is.NoErr(srv.Deploy(context.Background(), valid()))
	others := []struct {
		name string
		err  error
		code ray.ErrorCode
	}{
		{"Handle: nil Routes", second(serve.Handle[EchoIn, EchoOut](nil, "ok")), ray.InvalidArgument},
		{"Handle: no such deployment", second(serve.Handle[EchoIn, EchoOut](srv, "nope")), ray.NotFound},
		{"Handle: wrong types", second(serve.Handle[string, EchoOut](srv, "ok")), ray.InvalidArgument},
		{"call on the zero handle", second(serve.DeploymentHandle[EchoIn, EchoOut]{}.Call(context.Background(), EchoIn{})), ray.InvalidArgument},
		{"ErrOverloaded", serve.ErrOverloaded, ray.ResourceExhausted},
		{"ErrShuttingDown", serve.ErrShuttingDown, ray.Unavailable},
		{"ErrNoDeployment", serve.ErrNoDeployment, ray.NotFound},
		{"ErrBadCall", serve.ErrBadCall, ray.InvalidArgument},
		{"ErrReplicaLost", serve.ErrReplicaLost, ray.Unavailable},
		{"ErrNoReplica", serve.ErrNoReplica, ray.Unavailable},
		{"ErrRouterUnreachable", serve.ErrRouterUnreachable, ray.Unavailable},
		{"serve.Error 404", serve.Error(404, "x"), ray.NotFound},
		{"serve.CodeError", serve.CodeError(ray.FailedPrecondition, "x"), ray.FailedPrecondition},
	}
	h, err := serve.Handle[EchoIn, EchoOut](srv, "ok")
	is.NoErr(err)
	var nilCtx context.Context
	_, err = h.Call(nilCtx, EchoIn{})
	others = append(others, struct {
		name string
		err  error
		code ray.ErrorCode
	}{"call with a nil context", err, ray.InvalidArgument})
	for _, o := range others {
		t.Run(o.name, func(t *testing.T) {
			is := is.New(t)
			t.Log(o.err)
			is.True(o.err != nil)
			is.Equal(ray.CodeOf(o.err), o.code)
		})
	}
	is.NoErr(srv.Shutdown(context.Background()))
	err = srv.Deploy(context.Background(), valid())
	is.Equal(ray.CodeOf(err), ray.FailedPrecondition)
	is.True(errors.Is(err, ray.ErrClosed))
}

func second[T any](_ T, err error) error { return err }
