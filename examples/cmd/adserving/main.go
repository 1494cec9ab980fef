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
	"flag"
	"fmt"
	"log"

	"github.com/correctables/correctables/examples/ads"
	"github.com/correctables/correctables/examples/internal/cmdutil"
)

func main() {
	endpoints := flag.String("endpoints", cmdutil.Endpoints, "the replicas' client endpoints")
	users := flag.Int("users", 20, "user profiles")
	adsN := flag.Int("ads", 100, "ads")
	flag.Parse()
	ctx, b, done := cmdutil.Dial(*endpoints)
	defer done()
	d := ads.Dataset{Users: *users, Ads: *adsN, MaxRefs: 10, Seed: 1}
	if err := ads.Load(ctx, b, d, 16, nil); err != nil {
		log.Fatal(err)
	}
	s := ads.New(b)
	cmdutil.Compare(d.Users, "ads",
		func(uid int) (int, string, error) {
			v, err := s.FetchAds(ctx, uid).Final(ctx)
			return len(v.Value), "", err
		},
		func(uid int) error {
			_, err := s.FetchAdsStrong(ctx, uid)
			return err
		})
	st := s.Stats()
	fmt.Printf("speculations %d, re-run after a wrong preliminary view %d, completed and thrown away %d\n",
		st.Speculations, st.Rerun, st.Aborted)
}
