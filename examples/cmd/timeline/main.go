// Command timeline runs the Twissandra-like timeline on a running
// cluster: it loads a small corpus, posts a tweet, and reads every
// timeline twice, prefetching the tweets on the preliminary view of the
// tweet ids and waiting for the final view first.
//
//	go run ./cmd/correctables up &
//	go run ./examples/cmd/timeline
package main

import (
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/correctables/correctables/examples/internal/cmdutil"
	"github.com/correctables/correctables/examples/timeline"
)

func main() {
	endpoints := flag.String("endpoints", cmdutil.Endpoints, "the replicas' client endpoints")
	users := flag.Int("users", 20, "users")
	tweets := flag.Int("tweets", 100, "tweets")
	flag.Parse()
	ctx, b, done := cmdutil.Dial(*endpoints)
	defer done()
	d := timeline.Dataset{Users: *users, Tweets: *tweets, Followers: min(5, *users), Seed: 1}
	if err := timeline.Load(ctx, b, d, 16, nil); err != nil {
		log.Fatal(err)
	}
	a := timeline.New(b)
	if err := a.Post(ctx, fmt.Sprintf("hello-%d", time.Now().UnixNano()), "hello, world", []int{0}); err != nil {
		log.Fatal(err)
	}
	cmdutil.Compare(d.Users, "tweets",
		func(u int) (int, string, error) {
			v, err := a.GetTimeline(ctx, u).Final(ctx)
			last := ""
			if n := len(v.Value); n > 0 {
				last = v.Value[n-1].Text
			}
			return len(v.Value), "  latest: " + last, err
		},
		func(u int) error {
			_, err := a.GetTimelineStrong(ctx, u)
			return err
		})
	st := a.Stats()
	fmt.Printf("prefetches %d, re-run after a wrong preliminary view %d\n", st.Speculations, st.Rerun)
}
