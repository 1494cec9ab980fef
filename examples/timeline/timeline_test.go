package timeline_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/examples/internal/exampletest"
	"github.com/correctables/correctables/examples/store"
	"github.com/correctables/correctables/examples/timeline"
)

// TestTimeline loads a corpus on a real cluster, posts, and reads every
// timeline with speculation and without; then with stale preliminary
// timelines, where the prefetch must be aborted and re-run.
func TestTimeline(t *testing.T) {
	c := exampletest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := exampletest.Binding(t, c.Endpoints)
	d := timeline.Dataset{Users: 10, Tweets: 40, Followers: 3, Seed: 1}
	if err := timeline.Load(ctx, b, d, 8, nil); err != nil {
		t.Fatal(err)
	}
	a := timeline.New(b)
	a.Show = 5
	if err := a.Post(ctx, "new", "hello", []int{0, 1}); err != nil {
		t.Fatal(err)
	}
	if err := a.Post(ctx, "a,b", "bad id", []int{0}); err == nil {
		t.Fatal("tweet id with a comma accepted")
	}
	// Every replica has every timeline: no preliminary view is stale.
	var timelines []string
	for u := range d.Users {
		timelines = append(timelines, timeline.TimelineKey(u))
	}
	exampletest.Settle(ctx, t, c.Endpoints, b, timelines)
	check := func(a *timeline.App) {
		t.Helper()
		for u := range d.Users {
			spec, err := a.GetTimeline(ctx, u).Final(ctx)
			if err != nil {
				t.Fatal(err)
			}
			strong, err := a.GetTimelineStrong(ctx, u)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(spec.Value, strong) || len(strong) > a.Show {
				t.Fatalf("user %d: speculative %v, strong %v", u, spec.Value, strong)
			}
			if u <= 1 && (len(strong) == 0 || strong[len(strong)-1].ID != "new" || strong[len(strong)-1].Text != "hello") {
				t.Fatalf("user %d's timeline %v does not end with the tweet just posted", u, strong)
			}
		}
	}
	check(a)
	if got := a.Stats(); got.Rerun != 0 || got.Aborted != 0 || got.Speculations != uint64(d.Users) || got.Posts != 1 {
		t.Fatalf("stats %+v", got)
	}
	if got := timeline.Latest("t1,t2,t3,", 2); !reflect.DeepEqual(got, []string{"t2", "t3"}) {
		t.Fatalf("Latest: %v", got)
	}

	stale := exampletest.Stale(b,
		func(op store.Op) bool { return strings.HasPrefix(op.Key, "timeline:") },
		func(r store.Result) store.Result { r.Value = []byte("t0,"); return r })
	a = timeline.New(stale)
	a.Show = 5
	check(a)
	got := a.Stats()
	if got.Rerun == 0 || got.Speculations != uint64(d.Users)+got.Rerun || got.Aborted > got.Rerun {
		t.Fatalf("stale preliminary views: stats %+v: want each wrong speculation aborted and re-run", got)
	}
}
