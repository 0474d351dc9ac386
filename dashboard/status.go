package dashboard

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteStatus writes a summary of view v for a terminal, as `ray status`
// does for a Ray cluster (goray status prints it): nodes and resources,
// TPU slices by shape and state, reservations and the requests waiting
// for slices (for how long), tasks by name, actors, placement groups, the
// recent failures, train runs and serve deployments, and the parts of the
// state that could not be read.
func WriteStatus(w io.Writer, v *View) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	p("goray status at %s\n", v.Time.Format(time.DateTime+" MST"))

	alive, dead := 0, 0
	for _, n := range v.Nodes {
		if n.Alive {
			alive++
		} else {
			dead++
		}
	}
	p("\nNodes: %d alive, %d dead\n", alive, dead)
	used, total := resourceTotals(v)
	for _, k := range slices.Sorted(maps.Keys(total)) {
		p("  %s\t%s/%s used\n", k, fmtAmount(k, used[k]), fmtAmount(k, total[k]))
	}

	if len(v.Shapes) > 0 {
		p("\nTPU slices\n")
		for _, sh := range v.Shapes {
			states := map[string]int{}
			for _, s := range sh.Slices {
				states[s.State]++
			}
			p("  %s %s (%d chips per host)\t%d %s: %d free, %d busy, %d reserved, %d partial, %d broken\n",
				sh.Generation, sh.Topology, sh.ChipsPerHost, sh.Total, plural(sh.Total, "slice", "slices"),
				states[StateFree], states[StateBusy], states[StateReserved], states[StatePartial], states[StateBroken])
		}
		for _, sh := range v.Shapes {
			for _, s := range sh.Slices {
				if line := chipUsageLine(s); line != "" {
					p("    %s\t%s\n", s.Name, line)
				}
			}
		}
	}
	if len(v.Reservations) > 0 {
		p("\nReservations\n")
		for _, r := range v.Reservations {
			name := r.Name
			if name == "" {
				name = "-"
			}
			sub := ""
			if r.Subslice != "" {
				sub = ", sub-slice " + r.Subslice
			}
			p("  pg-%d %s\t%d %s%s: %s\n", r.Group, name, len(r.Slices), plural(len(r.Slices), "slice", "slices"), sub, strings.Join(r.Slices, ", "))
		}
	}
	if len(v.Pending) > 0 {
		p("\nWaiting for slices\n")
		for _, r := range v.Pending {
			name := r.Name
			if name == "" {
				name = "-"
			}
			p("  %s\t%d × %s %s\tfor %s\n", name, r.NumSlices, r.Generation, r.Topology, v.Time.Sub(r.Since).Round(time.Second))
		}
	}

	p("\nWork: %d queued, %d running\n", v.Work.Queued, v.Work.Running)
	type row struct {
		name                                 string
		running, queued                      int
		submitted, finished, failed, counted uint64
	}
	rows := map[string]*row{}
	get := func(name string) *row {
		if rows[name] == nil {
			rows[name] = &row{name: name}
		}
		return rows[name]
	}
	for _, t := range v.Work.Tasks {
		r := get(t.Name)
		r.running, r.queued = t.Running, t.Queued
	}
	if v.Counters != nil {
		for _, c := range v.Counters.Work {
			r := get(c.Name)
			r.submitted, r.finished, r.failed, r.counted = c.Submitted, c.Finished, c.Failed, 1
		}
	}
	if len(rows) > 0 {
		list := slices.SortedFunc(maps.Values(rows), func(a, b *row) int {
			return cmp.Or(cmp.Compare(b.running, a.running), cmp.Compare(b.queued, a.queued), cmp.Compare(b.submitted, a.submitted), cmp.Compare(a.name, b.name))
		})
		p("  TASK\tRUNNING\tQUEUED\tSUBMITTED\tFINISHED\tFAILED\n")
		for _, r := range list {
			if r.counted == 0 {
				p("  %s\t%d\t%d\t-\t-\t-\n", r.name, r.running, r.queued)
				continue
			}
			p("  %s\t%d\t%d\t%d\t%d\t%d\n", r.name, r.running, r.queued, r.submitted, r.finished, r.failed)
		}
	}
	if v.Counters != nil && v.Counters.WorkerRestarts > 0 {
		p("  worker restarts: %d\n", v.Counters.WorkerRestarts)
	}
	if len(v.Work.Actors) > 0 {
		type key struct{ class, state string }
		counts := map[key]int{}
		for _, a := range v.Work.Actors {
			counts[key{a.Class, a.State}]++
		}
		p("\nActors\n")
		for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b key) int { return cmp.Or(cmp.Compare(a.class, b.class), cmp.Compare(a.state, b.state)) }) {
			p("  %s\t%s\t%d\n", k.class, k.state, counts[k])
		}
	}
	if len(v.Work.PlacementGroups) > 0 {
		counts := map[string]int{}
		for _, g := range v.Work.PlacementGroups {
			counts[g.State]++
		}
		var parts []string
		for _, s := range slices.Sorted(maps.Keys(counts)) {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], s))
		}
		p("\nPlacement groups: %s\n", strings.Join(parts, ", "))
	}
	if len(v.Work.Failures) > 0 {
		const most = 5
		p("\nRecent failures (newest first; %d kept)\n", len(v.Work.Failures))
		for _, f := range v.Work.Failures[:min(most, len(v.Work.Failures))] {
			node := ""
			if f.Node != "" {
				node = " on " + f.Node
			}
			p("  %s %s attempt %d%s: %s: %s\n", f.Time.Format(time.TimeOnly), f.Task, f.Attempt, node, f.Code, firstLine(f.Message))
		}
	}
	if len(v.Train) > 0 {
		p("\nTrain runs\n")
		for _, r := range v.Train {
			state := "running"
			switch {
			case r.Done && r.Error != "":
				state = "failed: " + firstLine(r.Error)
			case r.Done:
				state = "finished"
			}
			p("  %s\t%s, attempt %d, iteration %d, slices %s\n", r.Name, state, r.Attempt, r.Iteration, strings.Join(r.Slices, ", "))
			if len(r.Profilers) > 0 {
				p("  \tprofilers (rank order): %s\n", strings.Join(r.Profilers, " "))
			}
		}
	}
	if len(v.Serve) > 0 {
		p("\nServe deployments\n")
		for _, d := range v.Serve {
			p("  %s\t%d/%d ready, %d queued, %.1f req/s, %d replica failures\n", d.Name, d.Ready, d.Target, d.Queued, d.RequestsPerSecond, d.ReplicaFailures)
		}
	}
	if len(v.Problems) > 0 {
		p("\nProblems\n")
		for _, pr := range v.Problems {
			p("  %s\n", pr)
		}
	}
	return tw.Flush()
}

// resourceTotals sums the alive nodes' resources, used and in all, but a
// TPU slice's own name resource (one per slice).
func resourceTotals(v *View) (used, total map[string]float64) {
	sliceNames := map[string]bool{}
	for _, sh := range v.Shapes {
		for _, s := range sh.Slices {
			sliceNames[s.Name] = true
		}
	}
	used, total = map[string]float64{}, map[string]float64{}
	for _, n := range v.Nodes {
		if !n.Alive {
			continue
		}
		for k, c := range n.Capacity {
			if sliceNames[k] {
				continue
			}
			total[k] += c
			used[k] += c - n.Free[k]
		}
	}
	return used, total
}

func fmtAmount(resource string, v float64) string {
	if resource == "memory" && v >= 1<<30 {
		return fmt.Sprintf("%.0fGiB", v/(1<<30))
	}
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// chipUsageLine summarises the chip metrics of slice s: the mean duty
// cycle and tensor-core utilisation of the chips that report them, the
// busiest chip, and the HBM in use; "" when no chip reports any.
func chipUsageLine(s Slice) string {
	var duty, tc, used, total float64
	var nDuty, nTC, nHBM int
	busiest := -1.0
	for _, c := range s.Chips {
		m := c.Metrics
		if m == nil {
			continue
		}
		if m.DutyCycle >= 0 {
			duty += m.DutyCycle
			nDuty++
			busiest = max(busiest, m.DutyCycle)
		}
		if m.TensorCoreUtilization >= 0 {
			tc += m.TensorCoreUtilization
			nTC++
		}
		if m.HBMUsed >= 0 && m.HBMTotal > 0 {
			used += m.HBMUsed
			total += m.HBMTotal
			nHBM++
		}
	}
	var parts []string
	if nDuty > 0 {
		parts = append(parts, fmt.Sprintf("duty cycle %.0f%% (busiest chip %.0f%%)", duty/float64(nDuty), busiest))
	}
	if nTC > 0 {
		parts = append(parts, fmt.Sprintf("tensor cores %.0f%%", tc/float64(nTC)))
	}
	if nHBM > 0 {
		parts = append(parts, fmt.Sprintf("HBM %.1f/%.1f GiB", used/(1<<30), total/(1<<30)))
	}
	return strings.Join(parts, ", ")
}
