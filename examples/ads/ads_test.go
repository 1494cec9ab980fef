package ads_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/examples/ads"
	"github.com/correctables/correctables/examples/internal/exampletest"
	"github.com/correctables/correctables/examples/store"
)

// TestFetchAds serves every user of a small data set on a real cluster, with
// speculation and without, and checks both deliver the ads of the final
// profile; then with stale preliminary profiles (a test double in front of
// the real binding), where every speculation must be aborted and re-run.
func TestFetchAds(t *testing.T) {
	c := exampletest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := exampletest.Binding(t, c.Endpoints)
	d := ads.Dataset{Users: 20, Ads: 50, MaxRefs: 5, Seed: 1}
	if err := ads.Load(ctx, b, d, 8, nil); err != nil {
		t.Fatal(err)
	}
	if err := ads.Load(ctx, b, ads.Dataset{}, 8, nil); err == nil {
		t.Fatal("empty data set accepted")
	}
	// A changed profile: user 0's interests now are ads 1 and 2.
	s := ads.New(b)
	if err := s.UpdateProfile(ctx, 0, "1,2"); err != nil {
		t.Fatal(err)
	}
	// Every replica has every profile: no preliminary view is stale.
	var profiles []string
	for uid := range d.Users {
		profiles = append(profiles, ads.ProfileKey(uid))
	}
	exampletest.Settle(ctx, t, c.Endpoints, b, profiles)
	check := func(s *ads.Server) {
		t.Helper()
		for uid := range d.Users {
			spec, err := s.FetchAds(ctx, uid).Final(ctx)
			if err != nil {
				t.Fatal(err)
			}
			strong, err := s.FetchAdsStrong(ctx, uid)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(spec.Value, strong) || len(strong) == 0 || len(strong) > d.MaxRefs {
				t.Fatalf("user %d: speculative %v, strong %v", uid, spec.Value, strong)
			}
		}
	}
	check(s)
	if got := s.Stats(); got.Requests != 2*uint64(d.Users) || got.Rerun != 0 || got.Aborted != 0 || got.Speculations != uint64(d.Users) {
		t.Fatalf("stats %+v: want %d requests, one speculation per speculative request, none aborted", got, 2*d.Users)
	}
	if ids, _ := ads.ParseRefs("1,2"); !reflect.DeepEqual(ids, []int{1, 2}) {
		t.Fatalf("ParseRefs: %v", ids)
	}

	stale := exampletest.Stale(b,
		func(op store.Op) bool { return strings.HasPrefix(op.Key, "profile:") },
		func(r store.Result) store.Result { r.Value = []byte("3"); return r })
	s = ads.New(stale)
	check(s)
	// A user whose ads are just ad 3, as the stale view says, is served
	// right by the speculation; every other one is re-run.
	got := s.Stats()
	var wrong uint64
	for uid := range d.Users {
		r, err := store.Final(ctx, b, store.Get(ads.ProfileKey(uid)))
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Value) != "3" {
			wrong++
		}
	}
	// Every speculation on a stale profile is re-run. A request whose final
	// view arrived before its speculation was attached speculates once, on
	// the final view (a superseded preliminary view is not delivered), so
	// it is neither stale nor re-run: at most one re-run per wrong user.
	if got.Rerun > wrong {
		t.Fatalf("stale preliminary views: %d re-runs, want at most %d (%+v)", got.Rerun, wrong, got)
	}
	if got.Rerun == 0 || got.Speculations != uint64(d.Users)+got.Rerun || got.Aborted > got.Rerun {
		t.Fatalf("stale preliminary views: stats %+v: want each wrong speculation aborted and re-run", got)
	}
}
