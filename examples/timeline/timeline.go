// Package timeline is a Twissandra-like microblog (Correctables §6.3.1):
// users post tweets, each tweet's id is appended to the timelines of the
// author's followers, and `get timeline` reads a timeline's tweet ids with
// invoke and prefetches the tweets speculatively on the preliminary view,
// fetching them again if the final view differs.
//
// It is written against a store.Binding, so it runs on any store a
// binding exists for.
package timeline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/examples/store"
)

// TimelineKey holds user's timeline: the ids of the tweets in it, each
// followed by a comma, oldest first.
func TimelineKey(user int) string { return "timeline:" + strconv.Itoa(user) }

// TweetKey holds tweet id's text.
func TweetKey(id string) string { return "tweet:" + id }

// Tweet is one tweet as shown.
type Tweet struct {
	ID, Text string
}

// Stats counts what an App did.
type Stats struct {
	// Timelines read; Speculations: prefetches run on a view of the ids;
	// Rerun: reads whose final view contradicted the preliminary one, so
	// the tweets were fetched again; Aborted: prefetches that had completed
	// when contradicted (the others were cancelled midway); Fetches: tweets
	// read; Posts: tweets posted.
	Timelines, Speculations, Rerun, Aborted, Fetches, Posts uint64
}

// App is the microblog on a store.
type App struct {
	b store.Binding
	// Show is how many of the latest tweets a timeline shows. Default 10.
	Show int

	timelines, fetches, posts atomic.Uint64
	spec                      store.Speculation
}

// New returns the application on binding b.
func New(b store.Binding) *App { return &App{b: b, Show: 10} }

// Stats returns the counts so far.
func (a *App) Stats() Stats {
	runs, reruns, aborted := a.spec.Counts()
	return Stats{Timelines: a.timelines.Load(), Speculations: runs,
		Rerun: reruns, Aborted: aborted, Fetches: a.fetches.Load(), Posts: a.posts.Load()}
}

// GetTimeline returns user's latest tweets, speculating on the preliminary
// view of the tweet ids.
func (a *App) GetTimeline(ctx context.Context, user int) *correctable.Correctable[[]Tweet] {
	a.timelines.Add(1)
	return store.ReadSpeculate(ctx, a.b, TimelineKey(user), &a.spec, a.fetch)
}

// GetTimelineStrong returns user's latest tweets without speculation: the
// final view of the ids first, then the tweets.
func (a *App) GetTimelineStrong(ctx context.Context, user int) ([]Tweet, error) {
	a.timelines.Add(1)
	r, err := store.Final(ctx, a.b, store.Get(TimelineKey(user)))
	if err != nil {
		return nil, err
	}
	return a.fetch(ctx, r)
}

// Latest returns the last n ids of a timeline's value.
func Latest(timeline string, n int) []string {
	ids := strings.Split(strings.TrimSuffix(timeline, ","), ",")
	if len(ids) == 1 && ids[0] == "" {
		return nil
	}
	if len(ids) > n {
		ids = ids[len(ids)-n:]
	}
	return ids
}

func (a *App) fetch(ctx context.Context, timeline store.Result) ([]Tweet, error) {
	if timeline.Err != nil {
		return nil, timeline.Err
	}
	ids := Latest(string(timeline.Value), a.Show)
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = TweetKey(id)
	}
	a.fetches.Add(uint64(len(ids)))
	texts, err := store.GetAll(ctx, a.b, keys, func(i int) error {
		return fmt.Errorf("timeline: tweet %s in a timeline but missing", ids[i])
	})
	if err != nil {
		return nil, err
	}
	out := make([]Tweet, len(ids))
	for i, id := range ids {
		out[i] = Tweet{ID: id, Text: string(texts[i])}
	}
	return out, nil
}

// Post stores tweet id with text, then appends its id to each follower's
// timeline, and waits until every write is final. The tweet is written
// before any timeline refers to it.
func (a *App) Post(ctx context.Context, id, text string, followers []int) error {
	if strings.Contains(id, ",") || id == "" {
		return fmt.Errorf("timeline: tweet id %q: must be non-empty, without commas", id)
	}
	a.posts.Add(1)
	if _, err := store.Final(ctx, a.b, store.Put(TweetKey(id), []byte(text))); err != nil {
		return err
	}
	errs := make([]error, len(followers))
	var wg sync.WaitGroup
	for i, f := range followers {
		wg.Go(func() {
			_, errs[i] = store.Final(ctx, a.b, store.Append(TimelineKey(f), []byte(id+",")))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Dataset sizes a corpus: Tweets tweets by random authors among Users
// users, each delivered to Followers random timelines (Correctables
// §6.3.1: 65k tweets over 22k timelines).
type Dataset struct {
	Users, Tweets, Followers int
	Seed                     uint64
}

// Validate checks the sizes.
func (d Dataset) Validate() error {
	if d.Users < 1 || d.Tweets < 0 || d.Followers < 1 || d.Followers > d.Users {
		return fmt.Errorf("timeline: %d users, %d tweets, %d followers each: want users >= 1, tweets >= 0, 1 <= followers <= users", d.Users, d.Tweets, d.Followers)
	}
	return nil
}

// Followers draws n distinct users out of users.
func Followers(r *rand.Rand, users, n int) []int {
	return r.Perm(users)[:n]
}

// Load writes the corpus with final writes, concurrency at a time: the
// tweets, then every timeline in one write each.
func Load(ctx context.Context, b store.Binding, d Dataset, concurrency int, progress func(done, total int)) error {
	if err := d.Validate(); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(d.Seed, 2))
	timelines := make([]strings.Builder, d.Users)
	ops := make([]store.Op, 0, d.Tweets+d.Users)
	for t := range d.Tweets {
		id := "t" + strconv.Itoa(t)
		ops = append(ops, store.Put(TweetKey(id), []byte("tweet "+id+" by user "+strconv.Itoa(r.IntN(d.Users)))))
		for _, f := range Followers(r, d.Users, d.Followers) {
			timelines[f].WriteString(id + ",")
		}
	}
	for u := range d.Users {
		ops = append(ops, store.Put(TimelineKey(u), []byte(timelines[u].String())))
	}
	// Tweets before timelines: a timeline never refers to a missing tweet.
	if err := store.LoadAll(ctx, b, ops[:d.Tweets], concurrency, progress); err != nil {
		return err
	}
	return store.LoadAll(ctx, b, ops[d.Tweets:], concurrency, nil)
}
