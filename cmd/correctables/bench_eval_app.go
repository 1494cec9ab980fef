package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/examples/ads"
	"github.com/correctables/correctables/examples/store"
	"github.com/correctables/correctables/examples/tickets"
	"github.com/correctables/correctables/examples/timeline"
	"github.com/correctables/correctables/internal/evalplot"
	"github.com/correctables/correctables/internal/loadgen"
)

type appFlags struct {
	evalFlags
	concurrency, workload  string
	step                   time.Duration
	users, adsN, maxRefs   int
	tweets, followers      int
	runs, stock, retailers int
	threshold              int64
}

func newAppCmd() *cobra.Command {
	var f appFlags
	cmd := &cobra.Command{
		Use:   "app ads|timeline|tickets",
		Short: "The applications of Correctables §6.3: ad serving and timeline (Figure 11), ticket selling (Figure 12)",
		Long: `app runs one of the example applications (examples/) behind the emulated WAN,
leader in --leader (IRL by default), and plots its figure:

ads, timeline (Figure 11): a client in IRL on the FRK replica runs the
application closed-loop with each --concurrency, for --step each, once with
speculation on the preliminary view (Listing 4) and once strong-only; a
--workload of reads (fetch ads / get timeline) and updates (a profile's new
ad references / a new tweet). It plots mean latency against throughput and
prints the speculation counts (re-runs after a wrong preliminary view).

tickets (Figure 12): --retailers retailers in FRK on the FRK replica sell a
stock of --stock tickets (Listing 5), --runs times with the --threshold and
--runs times with final views only, checking after every sale that each
ticket was sold exactly once and none was lost. It plots the latency of
each purchase by its position in the sale, averaged over the runs.`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"ads", "timeline", "tickets"},
		RunE: func(cmd *cobra.Command, args []string) error {
			out, progress := cmd.OutOrStdout(), cmd.ErrOrStderr()
			switch args[0] {
			case "ads", "timeline":
				conc, err := parseInts(f.concurrency, 1, 4096)
				if err != nil {
					return fmt.Errorf("--concurrency: %w", err)
				}
				w, err := loadgen.ParseWorkload(f.workload)
				if err != nil {
					return fmt.Errorf("--workload: %w", err)
				}
				if err := checkDuration("step", f.step, 100*time.Millisecond, time.Hour); err != nil {
					return err
				}
				return runSpecApp(cmd.Context(), out, progress, f, args[0], w, conc)
			case "tickets":
				if f.runs < 1 || f.runs > 1000 || f.stock < 1 || f.stock > 100_000 || f.retailers < 1 || f.retailers > 256 {
					return fmt.Errorf("--runs %d, --stock %d, --retailers %d: want 1-1000, 1-100,000, 1-256", f.runs, f.stock, f.retailers)
				}
				if f.threshold < 0 {
					return fmt.Errorf("--threshold %d: want 0 or more", f.threshold)
				}
				return runTickets(cmd.Context(), out, progress, f)
			default:
				return fmt.Errorf("unknown application %q (want ads, timeline or tickets)", args[0])
			}
		},
	}
	f.register(cmd, "IRL")
	fl := cmd.Flags()
	fl.StringVar(&f.concurrency, "concurrency", "1,8,32", "ads, timeline: requests in flight (closed loop), one step each")
	fl.StringVar(&f.workload, "workload", "b", "ads, timeline: YCSB mix of reads and updates (a: 50/50, b: 95/5, c: reads only)")
	fl.DurationVar(&f.step, "step", 5*time.Second, "ads, timeline: duration of each step")
	fl.IntVar(&f.users, "users", 1000, "ads: profiles; timeline: users")
	fl.IntVar(&f.adsN, "ads", 2300, "ads: ads")
	fl.IntVar(&f.maxRefs, "max-refs", 10, "ads: ad references per profile, at most (paper: 40)")
	fl.IntVar(&f.tweets, "tweets", 3000, "timeline: tweets")
	fl.IntVar(&f.followers, "followers", 5, "timeline: timelines each tweet goes to")
	fl.IntVar(&f.runs, "runs", 3, "tickets: sales of each kind")
	fl.IntVar(&f.stock, "stock", 500, "tickets: tickets per sale")
	fl.IntVar(&f.retailers, "retailers", 4, "tickets: retailers selling at once")
	fl.Int64Var(&f.threshold, "threshold", 20, "tickets: the last this many tickets are sold on final views only")
	return cmd
}

// specApp is ads or timeline behind one interface.
type specApp interface {
	read(ctx context.Context, key int, speculate bool) error
	update(ctx context.Context, key int, r *rand.Rand) error
	counts() (speculations, rerun uint64)
}

type adsApp struct {
	s *ads.Server
	d ads.Dataset
}

func (a adsApp) read(ctx context.Context, uid int, speculate bool) error {
	if speculate {
		_, err := a.s.FetchAds(ctx, uid).Final(ctx)
		return err
	}
	_, err := a.s.FetchAdsStrong(ctx, uid)
	return err
}

func (a adsApp) update(ctx context.Context, uid int, r *rand.Rand) error {
	return a.s.UpdateProfile(ctx, uid, ads.Refs(r, a.d.Ads, a.d.MaxRefs))
}

func (a adsApp) counts() (uint64, uint64) {
	st := a.s.Stats()
	return st.Speculations, st.Rerun
}

type timelineApp struct {
	a         *timeline.App
	users     int
	followers int
	next      *atomic.Int64
}

func (t timelineApp) read(ctx context.Context, u int, speculate bool) error {
	if speculate {
		_, err := t.a.GetTimeline(ctx, u).Final(ctx)
		return err
	}
	_, err := t.a.GetTimelineStrong(ctx, u)
	return err
}

func (t timelineApp) update(ctx context.Context, u int, r *rand.Rand) error {
	id := "b" + strconv.FormatInt(t.next.Add(1), 10)
	return t.a.Post(ctx, id, "benchmark tweet "+id+" by user "+strconv.Itoa(u), timeline.Followers(r, t.users, t.followers))
}

func (t timelineApp) counts() (uint64, uint64) {
	st := t.a.Stats()
	return st.Speculations, st.Rerun
}

func runSpecApp(ctx context.Context, out, progress io.Writer, f appFlags, name string, w loadgen.Workload, conc []int) error {
	e, err := startEvalCluster(ctx, progress, f.evalFlags)
	if err != nil {
		return err
	}
	defer e.stop()
	cl, err := e.dial(ctx, "IRL", "FRK")
	if err != nil {
		return err
	}
	defer cl.Close()
	b := store.Client(cl)
	loadProgress := func(done, total int) { fmt.Fprintf(progress, "loading: %d/%d\n", done, total) }
	var app specApp
	var keys int
	switch name {
	case "ads":
		d := ads.Dataset{Users: f.users, Ads: f.adsN, MaxRefs: f.maxRefs, Seed: f.seed}
		if err := d.Validate(); err != nil {
			return err
		}
		fmt.Fprintf(progress, "loading %d profiles and %d ads\n", d.Users, d.Ads)
		if err := ads.Load(ctx, b, d, 128, loadProgress); err != nil {
			return err
		}
		app, keys = adsApp{s: ads.New(b), d: d}, d.Users
	default:
		d := timeline.Dataset{Users: f.users, Tweets: f.tweets, Followers: f.followers, Seed: f.seed}
		if err := d.Validate(); err != nil {
			return err
		}
		fmt.Fprintf(progress, "loading %d tweets over %d timelines\n", d.Tweets, d.Users)
		if err := timeline.Load(ctx, b, d, 128, loadProgress); err != nil {
			return err
		}
		app, keys = timelineApp{a: timeline.New(b), users: d.Users, followers: d.Followers, next: new(atomic.Int64)}, d.Users
	}
	kg, err := loadgen.NewKeyGen("zipfian", keys)
	if err != nil {
		return err
	}
	header := []string{"app", "workload", "way", "concurrency", "throughput", "read_mean_ms", "read_p99_ms", "reads", "updates", "speculations", "rerun", "failed"}
	var rows [][]string
	series := []evalplot.Series{{Name: "with speculation (CC)"}, {Name: "strong-only (C2)"}}
	type point struct{ thr, mean float64 }
	results := make([][]point, 2)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "way\tconcurrency\tthroughput\tmean latency\tp99\tre-run/reads\t")
	n := 0
	for wi, speculate := range []bool{true, false} {
		way := []string{"speculation", "strong-only"}[wi]
		for _, c := range conc {
			n++
			fmt.Fprintf(progress, "[%d/%d] app %s: %s, %d in flight, %v\n", n, 2*len(conc), name, way, c, f.step)
			spec0, rerun0 := app.counts()
			h := newHist()
			var mu sync.Mutex
			var reads, updates, failed atomic.Int64
			sctx, cancel := context.WithTimeout(ctx, f.step)
			start := time.Now()
			var wg sync.WaitGroup
			for i := range c {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(f.seed+uint64(n), uint64(i)))
					for sctx.Err() == nil {
						key := kg.Next(r)
						t0 := time.Now()
						var err error
						read := r.Float64() < w.ReadFraction
						if read {
							err = app.read(ctx, key, speculate)
						} else {
							err = app.update(ctx, key, r)
						}
						switch {
						case err != nil:
							failed.Add(1)
						case read:
							reads.Add(1)
							mu.Lock()
							_ = h.RecordValue(time.Since(t0).Microseconds())
							mu.Unlock()
						default:
							updates.Add(1)
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			cancel()
			if err := ctx.Err(); err != nil {
				return err
			}
			spec1, rerun1 := app.counts()
			thr := float64(reads.Load()+updates.Load()) / elapsed.Seconds()
			mean := msOf(h.Mean())
			results[wi] = append(results[wi], point{thr, mean})
			series[wi].X = append(series[wi].X, thr)
			series[wi].Y = append(series[wi].Y, mean)
			rerunS := "-"
			if speculate {
				rerunS = fmt.Sprintf("%d/%d", rerun1-rerun0, reads.Load())
			}
			rows = append(rows, []string{name, w.Name, way, strconv.Itoa(c), f1(thr), f3(mean), f3(msOf(float64(h.ValueAtQuantile(99)))),
				itoa(reads.Load()), itoa(updates.Load()), fmt.Sprint(spec1 - spec0), fmt.Sprint(rerun1 - rerun0), itoa(failed.Load())})
			fmt.Fprintf(tw, "%s\t%d\t%.1f ops/s\t%.1fms\t%.1fms\t%s\t\n", way, c, thr, mean, msOf(float64(h.ValueAtQuantile(99))), rerunS)
			if failed.Load() > 0 {
				fmt.Fprintf(tw, "\t\t%d operations failed\t\t\t\t\n", failed.Load())
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var cmp []string
	for i, c := range conc {
		s, b := results[0][i], results[1][i]
		lat := 100 * (b.mean - s.mean) / b.mean
		thr := 100 * (s.thr - b.thr) / b.thr
		cmp = append(cmp, fmt.Sprintf("%d in flight: latency %.0f%% lower, throughput %+.1f%%", c, lat, thr))
		fmt.Fprintf(out, "with speculation at %d in flight: mean latency %.1f%% lower than strong-only, throughput %+.1f%%\n", c, lat, thr)
	}
	peak := func(ps []point) float64 {
		m := 0.0
		for _, p := range ps {
			m = max(m, p.thr)
		}
		return m
	}
	fmt.Fprintf(out, "peak throughput: with speculation %.1f ops/s, strong-only %.1f ops/s (%+.1f%%)\n",
		peak(results[0]), peak(results[1]), 100*(peak(results[0])-peak(results[1]))/peak(results[1]))
	if err := evalplot.WriteCSV(f.out, "fig11-"+name, header, rows); err != nil {
		return err
	}
	title := map[string]string{"ads": "Figure 11: ad serving (fetchAdsByUserId)", "timeline": "Figure 11: Twissandra-like get timeline"}[name]
	if err := evalplot.Draw(f.out, evalplot.Figure{
		Name: "fig11-" + name, Title: title, XLabel: "Throughput [ops/s]", YLabel: "Average latency [ms]",
		Series: series, Command: commandLine(),
		Caption: fmt.Sprintf("Client in IRL on the FRK replica, leader in %s, YCSB %s mix of reads and updates, closed loop, %v per point. %s (paper, ads: 40%% lower latency, 6%% less throughput).",
			f.leader, strings.ToUpper(w.Name), f.step, strings.Join(cmp, "; ")),
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s/fig11-%s.csv, .svg, .png\n", f.out, name)
	return nil
}

func runTickets(ctx context.Context, out, progress io.Writer, f appFlags) error {
	e, err := startEvalCluster(ctx, progress, f.evalFlags)
	if err != nil {
		return err
	}
	defer e.stop()
	var bs []store.Binding
	for range f.retailers {
		cl, err := e.dial(ctx, "FRK", "FRK")
		if err != nil {
			return err
		}
		defer cl.Close()
		bs = append(bs, store.Client(cl))
	}
	header := []string{"way", "run", "position", "latency_ms", "final_ms", "early", "left"}
	var rows [][]string
	type way struct {
		name      string
		threshold int64
	}
	ways := []way{{fmt.Sprintf("threshold %d (CZK)", f.threshold), f.threshold}, {"final views only (ZK)", int64(f.stock) + 1}}
	sums := make([][]float64, len(ways))
	counts := make([][]int, len(ways))
	for i := range ways {
		sums[i] = make([]float64, f.stock)
		counts[i] = make([]int, f.stock)
	}
	var problems []string
	var totalSold, totalEarly, totalRevoked int
	var meanEarly, meanLate []float64
	step := 0
	for run := range f.runs {
		for wi, wy := range ways {
			step++
			fmt.Fprintf(progress, "[%d/%d] tickets: %s, run %d, %d tickets, %d retailers\n", step, 2*f.runs, wy.name, run+1, f.stock, f.retailers)
			event := fmt.Sprintf("run%d-%d", run, wi)
			stock, err := tickets.Stock(ctx, bs[0], event, f.stock)
			if err != nil {
				return err
			}
			var (
				mu  sync.Mutex
				all []tickets.Purchase
				wg  sync.WaitGroup
				rs  []*tickets.Retailer
				es  []error
			)
			for _, b := range bs {
				r := tickets.NewRetailer(b, event, wy.threshold)
				rs = append(rs, r)
				wg.Go(func() {
					for {
						p, err := r.Purchase(ctx)
						mu.Lock()
						if err != nil {
							es = append(es, err)
							mu.Unlock()
							return
						}
						all = append(all, p)
						mu.Unlock()
						if !p.Sold {
							return
						}
					}
				})
			}
			wg.Wait()
			if err := errors.Join(es...); err != nil {
				return err
			}
			left, err := tickets.Drain(ctx, bs[0], event)
			if err != nil {
				return err
			}
			if err := tickets.Check(stock, all, left); err != nil {
				problems = append(problems, fmt.Sprintf("%s run %d: %v", wy.name, run+1, err))
			}
			var sold, early, revoked int
			for _, r := range rs {
				st := r.Stats()
				sold += int(st.Sold)
				early += int(st.Early)
				revoked += int(st.Revoked)
			}
			if sold != f.stock || len(left) != 0 {
				problems = append(problems, fmt.Sprintf("%s run %d: sold %d of %d, %d left", wy.name, run+1, sold, f.stock, len(left)))
			}
			if wi == 0 {
				totalSold += sold
				totalEarly += early
				totalRevoked += revoked
			}
			// Position in the sale: the n-th ticket taken, from what the
			// deciding view said was left.
			var sum [2]float64
			var cnt [2]int
			for _, p := range all {
				if !p.Sold {
					continue
				}
				pos := f.stock - int(p.Left)
				if pos < 1 || pos > f.stock {
					continue
				}
				sums[wi][pos-1] += msOf(float64(p.Latency.Microseconds()))
				counts[wi][pos-1]++
				k := 1
				if p.Early {
					k = 0
				}
				sum[k] += msOf(float64(p.Latency.Microseconds()))
				cnt[k]++
				rows = append(rows, []string{wy.name, strconv.Itoa(run + 1), strconv.Itoa(pos), f3(msOf(float64(p.Latency.Microseconds()))),
					f3(msOf(float64(p.Final.Microseconds()))), strconv.FormatBool(p.Early), strconv.FormatInt(p.Left, 10)})
			}
			if wi == 0 && cnt[0] > 0 && cnt[1] > 0 {
				meanEarly = append(meanEarly, sum[0]/float64(cnt[0]))
				meanLate = append(meanLate, sum[1]/float64(cnt[1]))
			}
		}
	}
	series := make([]evalplot.Series, len(ways))
	for wi, wy := range ways {
		series[wi].Name = wy.name
		for i := range f.stock {
			if counts[wi][i] > 0 {
				series[wi].X = append(series[wi].X, float64(i+1))
				series[wi].Y = append(series[wi].Y, sums[wi][i]/float64(counts[wi][i]))
			}
		}
	}
	avg := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	verdict := fmt.Sprintf("%d sales of %d tickets each way: every ticket sold exactly once, none lost, none revoked", f.runs, f.stock)
	if len(problems) > 0 || totalRevoked > 0 {
		verdict = fmt.Sprintf("PROBLEMS (%d revoked): %s", totalRevoked, strings.Join(problems, "; "))
	}
	fmt.Fprintln(out, verdict)
	fmt.Fprintf(out, "with threshold %d: %d of %d purchases confirmed on the preliminary view, mean %.1fms; the last ones on the final view, mean %.1fms\n",
		f.threshold, totalEarly, totalSold, avg(meanEarly), avg(meanLate))
	var strongMean float64
	if s := series[1]; len(s.Y) > 0 {
		strongMean = avg(s.Y)
		fmt.Fprintf(out, "final views only: mean %.1fms per purchase\n", strongMean)
	}
	if err := evalplot.WriteCSV(f.out, "fig12", header, rows); err != nil {
		return err
	}
	if err := evalplot.Draw(f.out, evalplot.Figure{
		Name: "fig12", Title: "Figure 12: selling tickets", XLabel: "Ticket (position in the sale)", YLabel: "Purchase latency [ms]",
		Series: series, Command: commandLine(),
		Caption: fmt.Sprintf("%d retailers in FRK on the FRK replica, leader in %s, %d tickets, averaged over %d runs. %s. Early purchases %.1f ms on average, the last %d on final views %.1f ms; final views only %.1f ms (paper: the last 20 tickets incur the latency of strong consistency).",
			f.retailers, f.leader, f.stock, f.runs, verdict, avg(meanEarly), f.threshold, avg(meanLate), strongMean),
	}); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s/fig12.csv, .svg, .png\n", f.out)
	if len(problems) > 0 || totalRevoked > 0 {
		return errors.New("tickets: a sale went wrong (see above)")
	}
	return nil
}
