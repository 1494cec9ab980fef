package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/evalplot"
)

func newQueueCmd() *cobra.Command {
	var (
		f              evalFlags
		ops, perThread int
		sizes, threads string
	)
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Queue costs: enqueue latency with the leader near and far, bytes per dequeue (Correctables §6.2.2, Figures 9-10)",
		Long: `queue measures the queue of the store behind the emulated WAN, the client in
IRL, as Correctables §6.2.2 measures ZooKeeper's:

Figure 9 analogue (fig9.svg): --ops enqueues of 20-byte items one at a time
for four placements of the contacted replica and the raft leader; the
preliminary and final views of invoke against invokeStrong alone (the
baseline), and the bytes per enqueue of invokeWeak and invoke.

Figure 10 analogue (fig10.svg): bytes per dequeue (invoke, both views) as the
queue grows (--sizes items) and as more threads dequeue at once (--threads,
each --per-thread dequeues, each on its own client). A dequeue reads only
the head of the queue, so its cost does not depend on the queue's length.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ops < 1 || ops > 100_000 || perThread < 1 || perThread > 100_000 {
				return fmt.Errorf("--ops %d, --per-thread %d: want 1 to 100,000", ops, perThread)
			}
			sz, err := parseInts(sizes, 0, 1_000_000)
			if err != nil {
				return fmt.Errorf("--sizes: %w", err)
			}
			th, err := parseInts(threads, 1, 1024)
			if err != nil {
				return fmt.Errorf("--threads: %w", err)
			}
			return runQueue(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f, ops, perThread, sz, th)
		},
	}
	f.register(cmd, "IRL")
	cmd.Flags().IntVar(&ops, "ops", 30, "enqueues per placement and way (Figure 9)")
	cmd.Flags().StringVar(&sizes, "sizes", "10,100,1000", "queue lengths (Figure 10)")
	cmd.Flags().StringVar(&threads, "threads", "1,2,4,8", "dequeuing threads (Figure 10)")
	cmd.Flags().IntVar(&perThread, "per-thread", 10, "dequeues per thread (Figure 10)")
	return cmd
}

func parseInts(s string, lo, hi int) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%q: want an integer from %d to %d", p, lo, hi)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no value in %q", s)
	}
	return out, nil
}

// item is a 20-byte queue item (Correctables §6.2.2: "an identifier of up
// to 20B").
func item(i int) []byte { return []byte(fmt.Sprintf("ticket-%013d", i)) }

func runQueue(ctx context.Context, out, progress io.Writer, f evalFlags, ops, perThread int, sizes, threads []int) error {
	e, err := startEvalCluster(ctx, progress, f)
	if err != nil {
		return err
	}
	defer e.stop()

	// Figure 9.
	placements := []struct{ replica, leader string }{{"IRL", "IRL"}, {"FRK", "FRK"}, {"IRL", "VRG"}, {"VRG", "VRG"}}
	header := []string{"replica", "leader", "way", "view", "mean_ms", "p50_ms", "p99_ms", "bytes_per_op"}
	var rows [][]string
	series := []evalplot.Series{{Name: "invoke: preliminary view"}, {Name: "invoke: final view"}, {Name: "invokeStrong only (baseline)"}}
	var cats []string
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "replica\tleader\tpreliminary mean\tfinal mean\tstrong-only mean\tbytes/enqueue weak\tinvoke\t")
	seq := 0
	for i, pl := range placements {
		fmt.Fprintf(progress, "[%d/%d] queue: client in IRL, replica in %s, leader in %s, %d enqueues each way\n", i+1, len(placements), pl.replica, pl.leader, ops)
		if err := e.moveLeader(ctx, pl.leader); err != nil {
			return err
		}
		cl, err := e.dial(ctx, "IRL", pl.replica)
		if err != nil {
			return err
		}
		pre, fin, strong, weak := newHist(), newHist(), newHist(), newHist()
		var bytesWeak, bytesInvoke uint64
		for way := range 3 {
			before := cl.Stats()
			for range ops {
				seq++
				op := client.Enqueue("fig9", item(seq))
				var c *correctable.Correctable[client.Result]
				switch way {
				case 0:
					c = cl.InvokeWeak(ctx, op)
				case 1:
					c = cl.Invoke(ctx, op)
				default:
					c = cl.InvokeStrong(ctx, op)
				}
				var vs []correctable.View[client.Result]
				for v := range c.AllViews() {
					vs = append(vs, v)
				}
				if err := c.Err(); err != nil {
					cl.Close()
					return err
				}
				switch way {
				case 0:
					_ = weak.RecordValue(vs[0].Elapsed.Microseconds())
				case 1:
					_ = pre.RecordValue(vs[0].Elapsed.Microseconds())
					_ = fin.RecordValue(vs[len(vs)-1].Elapsed.Microseconds())
				default:
					_ = strong.RecordValue(vs[0].Elapsed.Microseconds())
				}
			}
			after := cl.Stats()
			b := (after.WireBytesSent + after.WireBytesReceived - before.WireBytesSent - before.WireBytesReceived) / uint64(ops)
			switch way {
			case 0:
				bytesWeak = b
			case 1:
				bytesInvoke = b
			}
		}
		cl.Close()
		for _, r := range []struct {
			way, view string
			h         interface {
				Mean() float64
				ValueAtQuantile(float64) int64
			}
			bytes uint64
		}{{"invokeWeak", "preliminary", weak, bytesWeak}, {"invoke", "preliminary", pre, bytesInvoke}, {"invoke", "final", fin, bytesInvoke}, {"invokeStrong", "final", strong, 0}} {
			rows = append(rows, []string{pl.replica, pl.leader, r.way, r.view, f3(msOf(r.h.Mean())),
				f3(msOf(float64(r.h.ValueAtQuantile(50)))), f3(msOf(float64(r.h.ValueAtQuantile(99)))), fmt.Sprint(r.bytes)})
		}
		cats = append(cats, pl.replica+" / "+pl.leader)
		series[0].Y = append(series[0].Y, msOf(pre.Mean()))
		series[1].Y = append(series[1].Y, msOf(fin.Mean()))
		series[2].Y = append(series[2].Y, msOf(strong.Mean()))
		fmt.Fprintf(tw, "%s\t%s\t%.1fms\t%.1fms\t%.1fms\t%d\t%d\t\n", pl.replica, pl.leader, msOf(pre.Mean()), msOf(fin.Mean()), msOf(strong.Mean()), bytesWeak, bytesInvoke)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := evalplot.WriteCSV(f.out, "fig9", header, rows); err != nil {
		return err
	}
	if err := evalplot.Draw(f.out, evalplot.Figure{
		Name: "fig9", Title: "Figure 9 (analogue): enqueue latency, client in IRL", YLabel: "Average latency [ms]",
		XLabel:     "Contacted replica / leader",
		Categories: cats, Series: series, Command: commandLine(),
		Caption: fmt.Sprintf("%d enqueues of 20-byte items per bar, one at a time. Paper (ZooKeeper): the preliminary view costs the client-replica round trip (2, 20 or 83 ms); the gap is largest with the replica near and the leader far (IRL, VRG).", ops),
	}); err != nil {
		return err
	}

	// Figure 10.
	if err := e.moveLeader(ctx, f.leader); err != nil {
		return err
	}
	maxT := 0
	for _, t := range threads {
		maxT = max(maxT, t)
	}
	clients := make([]*client.Client, maxT)
	for i := range clients {
		if clients[i], err = e.dial(ctx, "IRL", "FRK"); err != nil {
			return err
		}
		defer clients[i].Close()
	}
	fill := func(queue string, n int) error {
		var next atomic.Int64
		var wg sync.WaitGroup
		var firstErr atomic.Value
		for w := range 32 {
			wg.Go(func() {
				for {
					i := int(next.Add(1))
					if i > n {
						return
					}
					v, err := clients[w%len(clients)].InvokeStrong(ctx, client.Enqueue(queue, item(i))).Final(ctx)
					if err == nil && v.Value.Err != nil {
						err = v.Value.Err
					}
					if err != nil {
						firstErr.CompareAndSwap(nil, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if err, ok := firstErr.Load().(error); ok {
			return err
		}
		return nil
	}
	header = []string{"queue_length", "threads", "dequeues", "wire_bytes", "bytes_per_dequeue", "empty_results"}
	rows = nil
	var dseries []evalplot.Series
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\nqueue length\tthreads\tbytes/dequeue\t")
	step := 0
	for _, size := range sizes {
		queue := "fig10-" + strconv.Itoa(size)
		s := evalplot.Series{Name: fmt.Sprintf("queue of %d", size)}
		for _, t := range threads {
			step++
			fmt.Fprintf(progress, "[%d/%d] queue: dequeue cost, queue of %d, %d threads\n", step, len(sizes)*len(threads), size, t)
			// The queue holds size items plus what the threads take.
			if err := fill(queue, t*perThread); err != nil {
				return err
			}
			if step == 1 || t == threads[0] {
				if err := fill(queue, size); err != nil {
					return err
				}
			}
			var before, after uint64
			for _, c := range clients[:t] {
				st := c.Stats()
				before += st.WireBytesSent + st.WireBytesReceived
			}
			var wg sync.WaitGroup
			var empty, failed atomic.Int64
			for i := range t {
				wg.Go(func() {
					for range perThread {
						v, err := clients[i].Dequeue(ctx, queue).Final(ctx)
						if err != nil {
							failed.Add(1)
							continue
						}
						if !v.Value.OK {
							empty.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if failed.Load() > 0 {
				return fmt.Errorf("queue: %d dequeues failed", failed.Load())
			}
			for _, c := range clients[:t] {
				st := c.Stats()
				after += st.WireBytesSent + st.WireBytesReceived
			}
			n := t * perThread
			per := float64(after-before) / float64(n)
			rows = append(rows, []string{strconv.Itoa(size), strconv.Itoa(t), strconv.Itoa(n), fmt.Sprint(after - before), f1(per), itoa(empty.Load())})
			s.X = append(s.X, float64(t))
			s.Y = append(s.Y, per)
			fmt.Fprintf(tw, "%d\t%d\t%.0f\t\n", size, t, per)
		}
		dseries = append(dseries, s)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := evalplot.WriteCSV(f.out, "fig10", header, rows); err != nil {
		return err
	}
	if err := evalplot.Draw(f.out, evalplot.Figure{
		Name: "fig10", Title: "Figure 10 (analogue): bytes per dequeue", XLabel: "Contending threads", YLabel: "Bytes per dequeue",
		Series: dseries, Command: commandLine(),
		Caption: fmt.Sprintf("invoke dequeues (both views) of 20-byte items, %d per thread, client in IRL on the FRK replica, leader in %s; gRPC bytes on the wire. Paper: ZooKeeper's dequeue reads the whole queue (cost grows with its length); Correctable ZooKeeper reads the constant-size head.", perThread, f.leader),
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nwrote %s/fig9.* and %s/fig10.* (csv, svg, png)\n", f.out, f.out)
	return nil
}
