// Package dashboard serves a read-only web view of a goray cluster: its
// nodes, its TPU slices drawn as chip grids, its work, and the training
// runs and serve deployments a driver tracks.
//
// # Mounting
//
// [New] returns a [Dashboard], an http.Handler a driver mounts on its own
// server, or serves on a port with one call:
//
//	d, err := dashboard.New(cluster, nil)
//	...
//	go d.ListenAndServe(ctx, "") // 127.0.0.1:8265 until ctx ends
//
// The page is plain HTML, CSS and JavaScript embedded in the binary; it
// follows the cluster through a server-sent event stream (GET
// /api/events), and GET /api/view returns one [View] as JSON.
//
// # TPU slices
//
// Every slice is drawn as its chip grid (3-D topologies as z-layers side
// by side), each chip labelled with its host's worker ID and coloured by
// state: free, busy (work outside a reservation), reserved (one colour per
// reservation, named in a legend that lists each reservation's slices
// together, so a multislice reservation reads as one), or dead (its host
// is dead, and the slice is broken). Slices are grouped by shape with
// totals, as [ray.SummarizeSlices] counts them.
//
// # Train and serve
//
// package train reports through callbacks: feed a [TrainRun] from
// train.RunConfig.OnReport and OnFailure and [TrainRun.Finish], and add it
// with [Dashboard.TrackRun]. A *serve.Server reports its deployments
// itself; add it with [Dashboard.TrackServe].
//
// # Status endpoint and metrics
//
// A driver's dashboard is its status endpoint: GET /api/view is what
// `goray status --driver ADDR` reads ([Client], [WriteStatus]), and GET
// /metrics the runtime's metrics in the Prometheus text format
// ([WriteMetrics]). [Client.ServeProxy] serves a driver's live page on
// this machine (`goray dashboard --driver ADDR`).
//
// # Safety
//
// The dashboard is read-only: it answers GET and HEAD only, and has no
// action that changes the cluster. [Listen] binds loopback by default, and
// on loopback [Dashboard.Serve] refuses requests for other host names
// (DNS rebinding). Off loopback it serves only with Options.Token set
// ([NewToken]): every request must then carry it as a bearer token, and
// any other gets a bare 401. To reach a loopback endpoint from elsewhere,
// tunnel to it (ssh -L 8265:127.0.0.1:8265 host, or kubectl
// port-forward); docs/dashboard.md says more.
package dashboard
