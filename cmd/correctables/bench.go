package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/internal/cluster"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure the store (see the subcommands)",
	}
	cmd.AddCommand(newLatencyGapCmd(), newLoadCmd(), newEtcdMemberCmd(), newPileusCmd())
	cmd.AddCommand(newCPQCmd())
	cmd.AddCommand(evalCmds()...)
	return cmd
}

func newLatencyGapCmd() *cobra.Command {
	var (
		wan, region string
		ops         int
		noSync      bool
		keep        bool
	)
	cmd := &cobra.Command{
		Use:   "latency-gap",
		Short: "The window between preliminary and final views (Correctables §6.2.1, Figure 5)",
		Long: `latency-gap starts a three-replica cluster in this process (its own
temporary data directory), optionally behind an emulated WAN, moves raft
leadership to the replica nearest the client, and runs --ops operations of
each kind one at a time from the client region: invoke (both views),
invokeWeak (preliminary only) and invokeStrong (final only), for reads and
for writes. It prints p50 and p99 of each view with the physical lower bound
beside it: the client's round trip to the nearest replica for a preliminary
view, plus the leader's round trip to the nearest other replica (a raft
quorum of three) for a final view.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if ops < 1 || ops > 1_000_000 {
				return fmt.Errorf("--ops %d: want 1 to 1,000,000", ops)
			}
			dir, err := os.MkdirTemp("", "correctables-bench-")
			if err != nil {
				return err
			}
			if !keep {
				defer os.RemoveAll(dir)
			}
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			c, err := cluster.Start(cluster.Options{Dir: dir, WAN: wan, ClientRegion: region, NoSync: noSync, Logger: log})
			if err != nil {
				return err
			}
			defer c.Stop()
			return runLatencyGap(cmd.Context(), cmd.OutOrStdout(), c, ops)
		},
	}
	f := cmd.Flags()
	f.StringVar(&wan, "wan", "", "emulated WAN preset: ec2-2016 or pileus-2013 (default: none, loopback)")
	f.StringVar(&region, "client-region", "", "client region (with --wan; default the first replica's)")
	f.IntVar(&ops, "ops", 200, "operations per row")
	f.BoolVar(&noSync, "no-sync", false, "do not fsync (measures the protocol without the disk)")
	f.BoolVar(&keep, "keep", false, "keep the data directory")
	return cmd
}

func runLatencyGap(ctx context.Context, out io.Writer, c *cluster.Cluster, ops int) error {
	// The replica nearest the client leads: the best case the protocol
	// allows, and the one the lower bounds below describe.
	nearest := c.Nearest()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.MoveLeader(wctx, nearest); err != nil {
		return err
	}
	cl, err := client.Dial(wctx, c.Endpoints)
	if err != nil {
		return err
	}
	defer cl.Close()

	quorum := time.Duration(0)
	var others []time.Duration
	for id := uint64(1); id <= uint64(len(c.Servers)); id++ {
		if id != nearest {
			others = append(others, c.RTT(nearest, id))
		}
	}
	slices.Sort(others)
	if len(others) > 0 {
		// A majority of n replicas is the leader and (n-1)/2 others.
		quorum = others[(len(c.Servers)-1)/2-1]
	}
	clientRTT := c.RTT(0, nearest)
	if c.Net != nil {
		fmt.Fprintf(out, "latency-gap on emulated WAN %s\n", c.Net.Topology().String())
		fmt.Fprintf(out, "client in %s; leader moved to replica %d (%s), the nearest\n", c.ClientRegion, nearest, c.Regions[nearest-1])
	} else {
		fmt.Fprintf(out, "latency-gap on loopback (no emulated WAN)\n")
	}
	fmt.Fprintf(out, "%d operations per row, one at a time\n\n", ops)

	type row struct {
		name, view string
		lb         time.Duration
		h          *hdrhistogram.Histogram
	}
	newH := func() *hdrhistogram.Histogram { return hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3) }
	var rows []*row
	add := func(name, view string, lb time.Duration) *row {
		r := &row{name: name, view: view, lb: lb, h: newH()}
		rows = append(rows, r)
		return r
	}
	for _, kind := range []string{"write", "read"} {
		op := func(i int) client.Op {
			k := "k" + strconv.Itoa(i%64)
			if kind == "write" {
				return client.Put(k, []byte("v"+strconv.Itoa(i)))
			}
			return client.Get(k)
		}
		bothP := add("invoke "+kind, "preliminary", clientRTT)
		bothF := add("invoke "+kind, "final", clientRTT+quorum)
		weak := add("invokeWeak "+kind, "preliminary", clientRTT)
		strong := add("invokeStrong "+kind, "final", clientRTT+quorum)
		for i := 0; i < ops; i++ {
			if err := measure(ctx, cl.Invoke(ctx, op(i)), bothP.h, bothF.h); err != nil {
				return err
			}
			if err := measure(ctx, cl.InvokeWeak(ctx, op(i)), weak.h, nil); err != nil {
				return err
			}
			if err := measure(ctx, cl.InvokeStrong(ctx, op(i)), nil, strong.h); err != nil {
				return err
			}
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tview\tp50\tp99\tlower bound\tp50 - bound\t")
	ms := func(us int64) string { return fmt.Sprintf("%.2fms", float64(us)/1000) }
	for _, r := range rows {
		p50 := r.h.ValueAtQuantile(50)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, r.view, ms(p50), ms(r.h.ValueAtQuantile(99)),
			ms(r.lb.Microseconds()), ms(p50-r.lb.Microseconds()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	st := cl.Stats()
	fmt.Fprintf(out, "\nclient link: %d views, %d confirmations; %d bytes sent, %d received, ~%d saved by confirmations\n",
		st.Views, st.Confirmations, st.BytesSent, st.BytesReceived, st.BytesSaved)
	return nil
}

// measure waits for a Correctable and records when its preliminary and final
// views arrived.
func measure(ctx context.Context, c *correctable.Correctable[client.Result], prelim, final *hdrhistogram.Histogram) error {
	for v := range c.AllViews() {
		h := prelim
		if v.Final && final != nil {
			h = final
		}
		if v.Final && final == nil && prelim != nil {
			h = prelim
		}
		if h != nil {
			if err := h.RecordValue(v.Elapsed.Microseconds()); err != nil {
				return err
			}
		}
	}
	if err := c.Err(); err != nil {
		return fmt.Errorf("latency-gap: %w", err)
	}
	if v, ok := c.Latest(); ok && v.Value.Err != nil {
		return fmt.Errorf("latency-gap: operation failed: %w", v.Value.Err)
	}
	return nil
}
