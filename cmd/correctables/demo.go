package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/correctable/correctabletest"
)

// demoConfig holds the flags of `correctables demo`.
type demoConfig struct {
	BackupLatency  time.Duration // round trip to the closest backup
	PrimaryLatency time.Duration // round trip to the primary
	FetchLatency   time.Duration // fetching and post-processing the ads
	Requests       int           // requests to serve
	StaleEvery     int           // every n-th request the backup is stale; 0: never
}

// maxDemoLatency bounds every latency flag, so a typo cannot hang the demo.
const maxDemoLatency = 10 * time.Second

func (c demoConfig) validate() error {
	for _, l := range []struct {
		flag string
		d    time.Duration
	}{{"--backup-latency", c.BackupLatency}, {"--primary-latency", c.PrimaryLatency}, {"--fetch-latency", c.FetchLatency}} {
		if l.d < 0 || l.d > maxDemoLatency {
			return fmt.Errorf("%s %v: must be between 0 and %v", l.flag, l.d, maxDemoLatency)
		}
	}
	if c.Requests < 1 || c.Requests > 100 {
		return fmt.Errorf("--requests %d: must be between 1 and 100", c.Requests)
	}
	if c.StaleEvery < 0 {
		return fmt.Errorf("--stale-every %d: must be 0 (never) or positive", c.StaleEvery)
	}
	return nil
}

func newDemoCmd() *cobra.Command {
	cfg := demoConfig{
		BackupLatency:  20 * time.Millisecond,
		PrimaryLatency: 150 * time.Millisecond,
		FetchLatency:   100 * time.Millisecond,
		Requests:       4,
		StaleEvery:     3,
	}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Serve ads with speculation on preliminary views (Correctables Listing 4)",
		Long: `demo runs the ad-serving scenario of the Correctables paper (§4.2, Listing 4)
on the in-memory primary-backup reference binding. Each request reads the
user's ad references with Invoke (a preliminary view from the backup, a final
view from the primary, queried in parallel) and fetches the ads.

Each request runs twice: speculating on the preliminary view (Speculate), and
waiting for the final view before fetching. The demo prints every view and
the measured time of both, and the time speculation saved. Every
--stale-every-th request the backup misses the latest references, so the
speculation is wrong and the ads are fetched again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.validate(); err != nil {
				return err
			}
			return runDemo(cmd.Context(), cmd.OutOrStdout(), cfg)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.BackupLatency, "backup-latency", cfg.BackupLatency, "round-trip time to the closest backup")
	f.DurationVar(&cfg.PrimaryLatency, "primary-latency", cfg.PrimaryLatency, "round-trip time to the primary")
	f.DurationVar(&cfg.FetchLatency, "fetch-latency", cfg.FetchLatency, "time to fetch and post-process the ads")
	f.IntVar(&cfg.Requests, "requests", cfg.Requests, "number of requests (1-100)")
	f.IntVar(&cfg.StaleEvery, "stale-every", cfg.StaleEvery, "make the backup stale on every n-th request (0: never)")
	return cmd
}

func runDemo(ctx context.Context, w io.Writer, cfg demoConfig) error {
	if ctx == nil {
		ctx = context.Background()
	}
	cluster, err := correctabletest.NewCluster(correctabletest.Config{
		BackupLatency:  cfg.BackupLatency,
		PrimaryLatency: cfg.PrimaryLatency,
	})
	if err != nil {
		return err
	}
	b := correctabletest.Parallel[string](cluster)
	cluster.Put("adrefs:alice", "ad-1,ad-2")

	var fetches, aborts atomic.Int32
	getAds := func(ctx context.Context, refs string) ([]string, error) {
		fetches.Add(1)
		t := time.NewTimer(cfg.FetchLatency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var ads []string
		for _, ref := range strings.Split(refs, ",") {
			ads = append(ads, "<"+ref+">")
		}
		return ads, nil
	}
	abort := func([]string) { aborts.Add(1) }
	op := correctabletest.Get("adrefs:alice")

	fmt.Fprintf(w, "ad serving: backup %v, primary %v, fetch %v, %d requests\n\n",
		cfg.BackupLatency, cfg.PrimaryLatency, cfg.FetchLatency, cfg.Requests)
	var totalSpec, totalWait time.Duration
	for i := 1; i <= cfg.Requests; i++ {
		stale := cfg.StaleEvery > 0 && i%cfg.StaleEvery == 0
		lag := 0
		if stale { // alice's interests change; the backup has not seen it yet
			lag = 1
			cluster.Put("adrefs:alice", fmt.Sprintf("ad-%d,ad-%d", 2*i+1, 2*i+2))
		}
		if err := cluster.SetLag(correctabletest.BackupReplica, lag); err != nil {
			return err
		}
		fmt.Fprintf(w, "request %d (backup %s):\n", i, map[bool]string{false: "in sync", true: "stale"}[stale])

		// Speculating on the preliminary view.
		fetches.Store(0)
		aborts.Store(0)
		var (
			mu    sync.Mutex
			views []correctable.View[string]
		)
		record := func(v correctable.View[string]) { mu.Lock(); views = append(views, v); mu.Unlock() }
		start := time.Now()
		refs := correctable.Invoke(ctx, b, op)
		refs.SetCallbacks(correctable.Callbacks[string]{OnUpdate: record, OnFinal: record})
		ads, err := correctable.Speculate(refs, getAds, abort).Final(ctx)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		spec := time.Since(start)
		mu.Lock()
		for _, v := range views {
			note := ""
			if v.Confirmed {
				note = " (confirmed)"
			}
			fmt.Fprintf(w, "  view %-9s %8v  %s%s\n", v.Level, v.Elapsed.Round(time.Millisecond), v.Value, note)
		}
		mu.Unlock()
		fmt.Fprintf(w, "  speculate:  %8v  %v  (fetched %s, %d aborted)\n",
			spec.Round(time.Millisecond), ads.Value, times(fetches.Load()), aborts.Load())

		// Waiting for the final view, then fetching.
		start = time.Now()
		final, err := correctable.Invoke(ctx, b, op).Final(ctx)
		if err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		if _, err := getAds(ctx, final.Value); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
		wait := time.Since(start)
		fmt.Fprintf(w, "  wait final: %8v\n  saved:      %8v\n\n", wait.Round(time.Millisecond), (wait - spec).Round(time.Millisecond))
		totalSpec += spec
		totalWait += wait
	}
	saved := totalWait - totalSpec
	fmt.Fprintf(w, "total: speculate %v, wait final %v, saved %v (%.0f%%)\n",
		totalSpec.Round(time.Millisecond), totalWait.Round(time.Millisecond), saved.Round(time.Millisecond),
		100*float64(saved)/float64(max(totalWait, 1)))
	return nil
}

// times says how many times: "once", "twice", "3 times".
func times[N ~int32 | ~int64 | ~int](n N) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}
