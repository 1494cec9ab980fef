// Command timeline runs the Twissandra-like timeline on a running
// cluster: it loads a small corpus, posts a tweet, and reads every
// timeline twice, prefetching the tweets on the preliminary view of the
// tweet ids and waiting for the final view first.
//
//	go run ./cmd/correctables up &
//	go run ./examples/cmd/timeline
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/examples/store"
	"github.com/correctables/correctables/examples/timeline"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103", "the replicas' client endpoints")
	users := flag.Int("users", 20, "users")
	tweets := flag.Int("tweets", 100, "tweets")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, strings.Split(*endpoints, ","))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	b := store.Client(c)
	d := timeline.Dataset{Users: *users, Tweets: *tweets, Followers: min(5, *users), Seed: 1}
	if err := timeline.Load(ctx, b, d, 16, nil); err != nil {
		log.Fatal(err)
	}
	a := timeline.New(b)
	if err := a.Post(ctx, fmt.Sprintf("hello-%d", time.Now().UnixNano()), "hello, world", []int{0}); err != nil {
		log.Fatal(err)
	}
	var spec, strong time.Duration
	for u := range d.Users {
		start := time.Now()
		v, err := a.GetTimeline(ctx, u).Final(ctx)
		if err != nil {
			log.Fatal(err)
		}
		ts := time.Since(start)
		start = time.Now()
		if _, err := a.GetTimelineStrong(ctx, u); err != nil {
			log.Fatal(err)
		}
		tw := time.Since(start)
		spec, strong = spec+ts, strong+tw
		last := ""
		if n := len(v.Value); n > 0 {
			last = v.Value[n-1].Text
		}
		fmt.Printf("user %3d: %2d tweets  speculative %7.1fms  strong-only %7.1fms  latest: %s\n", u, len(v.Value),
			ms(ts), ms(tw), last)
	}
	st := a.Stats()
	fmt.Printf("\nmean: speculative %.1fms, strong-only %.1fms\n", ms(spec)/float64(d.Users), ms(strong)/float64(d.Users))
	fmt.Printf("prefetches %d, re-run after a wrong preliminary view %d\n", st.Speculations, st.Rerun)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
