// Command adserving serves ads with speculation (Correctables Listing 4) on
// a running cluster: it loads a small data set of profiles and ads, then
// serves each user twice, speculating on the preliminary view of their ad
// references and waiting for the final view first, and prints both
// latencies and the speculation counts.
//
//	go run ./cmd/correctables up &     # or up --wan ec2-2016 --client-region IRL
//	go run ./examples/cmd/adserving
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/examples/ads"
	"github.com/correctables/correctables/examples/store"
)

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103", "the replicas' client endpoints")
	users := flag.Int("users", 20, "user profiles")
	adsN := flag.Int("ads", 100, "ads")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, strings.Split(*endpoints, ","))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	b := store.Client(c)
	d := ads.Dataset{Users: *users, Ads: *adsN, MaxRefs: 10, Seed: 1}
	if err := ads.Load(ctx, b, d, 16, nil); err != nil {
		log.Fatal(err)
	}
	s := ads.New(b)
	var spec, strong time.Duration
	for uid := range d.Users {
		start := time.Now()
		v, err := s.FetchAds(ctx, uid).Final(ctx)
		if err != nil {
			log.Fatal(err)
		}
		ts := time.Since(start)
		start = time.Now()
		if _, err := s.FetchAdsStrong(ctx, uid); err != nil {
			log.Fatal(err)
		}
		tw := time.Since(start)
		spec, strong = spec+ts, strong+tw
		fmt.Printf("user %3d: %2d ads  speculative %7.1fms  strong-only %7.1fms\n", uid, len(v.Value),
			ms(ts), ms(tw))
	}
	st := s.Stats()
	fmt.Printf("\nmean: speculative %.1fms, strong-only %.1fms\n", ms(spec)/float64(d.Users), ms(strong)/float64(d.Users))
	fmt.Printf("speculations %d, re-run after a wrong preliminary view %d, completed and thrown away %d\n",
		st.Speculations, st.Rerun, st.Aborted)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
