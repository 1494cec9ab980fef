// Package ads is the ad-serving application of Correctables (§4.2,
// Listing 4; evaluated in §6.3.1): a user's profile holds references to
// the ads personalised for them; serving a request reads the references
// with invoke and fetches the ads speculatively on the preliminary view,
// delivering once the final view confirms the references, and fetching
// again when it does not.
//
//	def fetchAdsByUserId(uid):
//	    invoke(getPersonalizedAdsRefs(uid))
//	        .speculate(getAds)          # fetch & post-process ads
//	        .setCallbacks(onFinal = (ads) => deliver(ads))
//
// The application is written against a store.Binding, so it runs on any
// store a binding exists for.
package ads

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/examples/store"
)

// ProfileKey is where user uid's ad references are kept (comma-separated
// ad ids).
func ProfileKey(uid int) string { return "profile:" + strconv.Itoa(uid) }

// AdKey is where ad id is kept.
func AdKey(id int) string { return "ad:" + strconv.Itoa(id) }

// Ad is one ad as delivered.
type Ad struct {
	ID      int
	Content string
}

// Stats counts what a Server did.
type Stats struct {
	// Requests served; Speculations: times getAds ran on a view of the
	// references; Rerun: requests whose final view contradicted the
	// preliminary one, so getAds ran again on it; Aborted: speculations
	// that had completed when contradicted, whose result was thrown away
	// (the others were cancelled midway); Fetches: ads read.
	Requests, Speculations, Rerun, Aborted, Fetches uint64
}

// Server serves ads from a store.
type Server struct {
	b                 store.Binding
	requests, fetches atomic.Uint64
	spec              store.Speculation
}

// New returns a Server on binding b.
func New(b store.Binding) *Server { return &Server{b: b} }

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	runs, reruns, aborted := s.spec.Counts()
	return Stats{Requests: s.requests.Load(), Speculations: runs,
		Rerun: reruns, Aborted: aborted, Fetches: s.fetches.Load()}
}

// FetchAds serves user uid's ads, speculating on the preliminary view of
// their references (Listing 4): the Correctable it returns closes with the
// ads fetched from the final references.
func (s *Server) FetchAds(ctx context.Context, uid int) *correctable.Correctable[[]Ad] {
	s.requests.Add(1)
	return store.ReadSpeculate(ctx, s.b, ProfileKey(uid), &s.spec, s.getAds)
}

// FetchAdsStrong serves user uid's ads without speculation: it waits for
// the final view of the references, then fetches the ads (the strong-only
// baseline of Figure 11).
func (s *Server) FetchAdsStrong(ctx context.Context, uid int) ([]Ad, error) {
	s.requests.Add(1)
	r, err := store.Final(ctx, s.b, store.Get(ProfileKey(uid)))
	if err != nil {
		return nil, err
	}
	return s.getAds(ctx, r)
}

// getAds fetches the ads a profile refers to, in parallel, each with a
// strongly consistent read (as the paper's getAds, a read at R = 2).
func (s *Server) getAds(ctx context.Context, profile store.Result) ([]Ad, error) {
	if profile.Err != nil {
		return nil, profile.Err
	}
	if !profile.Found {
		return nil, nil
	}
	ids, err := ParseRefs(string(profile.Value))
	if err != nil {
		return nil, err
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = AdKey(id)
	}
	s.fetches.Add(uint64(len(ids)))
	values, err := store.GetAll(ctx, s.b, keys, func(i int) error {
		return fmt.Errorf("ads: ad %d referenced but missing", ids[i])
	})
	if err != nil {
		return nil, err
	}
	ads := make([]Ad, len(ids))
	for i, id := range ids {
		ads[i] = Ad{ID: id, Content: string(values[i])}
	}
	return ads, nil
}

// ParseRefs parses a profile's comma-separated ad ids.
func ParseRefs(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	ids := make([]int, len(parts))
	for i, p := range parts {
		id, err := strconv.Atoi(p)
		if err != nil {
			return nil, fmt.Errorf("ads: bad reference %q in profile", p)
		}
		ids[i] = id
	}
	return ids, nil
}

// Refs draws between 1 and maxRefs distinct ad ids out of ads.
func Refs(r *rand.Rand, ads, maxRefs int) string {
	n := 1 + r.IntN(min(maxRefs, ads))
	seen := make(map[int]bool, n)
	var b strings.Builder
	for len(seen) < n {
		id := r.IntN(ads)
		if seen[id] {
			continue
		}
		seen[id] = true
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(id))
	}
	return b.String()
}

// UpdateProfile gives user uid new ad references (their interests
// changed) and waits until the write is final.
func (s *Server) UpdateProfile(ctx context.Context, uid int, refs string) error {
	_, err := store.Final(ctx, s.b, store.Put(ProfileKey(uid), []byte(refs)))
	return err
}

// Dataset sizes a data set: Users profiles, each referring to between 1
// and MaxRefs of Ads ads (Correctables §6.3.1: 100k profiles, 230k ads,
// 1 to 40 references).
type Dataset struct {
	Users, Ads, MaxRefs int
	Seed                uint64
}

// Validate checks the sizes.
func (d Dataset) Validate() error {
	if d.Users < 1 || d.Ads < 1 || d.MaxRefs < 1 {
		return fmt.Errorf("ads: data set of %d users, %d ads, up to %d references: all must be at least 1", d.Users, d.Ads, d.MaxRefs)
	}
	return nil
}

// Load writes the data set with final writes, concurrency at a time;
// progress, if set, is called after every 1,000 writes with the count.
func Load(ctx context.Context, b store.Binding, d Dataset, concurrency int, progress func(done, total int)) error {
	if err := d.Validate(); err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(d.Seed, 1))
	ops := make([]store.Op, 0, d.Ads+d.Users)
	for id := range d.Ads {
		ops = append(ops, store.Put(AdKey(id), []byte("ad "+strconv.Itoa(id)+": buy more things")))
	}
	for uid := range d.Users {
		ops = append(ops, store.Put(ProfileKey(uid), []byte(Refs(r, d.Ads, d.MaxRefs))))
	}
	return store.LoadAll(ctx, b, ops, concurrency, progress)
}
