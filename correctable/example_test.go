package correctable_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/correctable/correctabletest"
)

// userMessages is Listing 2: the application states the consistency it
// needs; cache coherence and bypassing live in the binding, not here.
func userMessages(ctx context.Context, b correctable.Binding[correctabletest.Op[string], string], user string, strong bool) *correctable.Correctable[string] {
	op := correctabletest.Get("messages:" + user)
	if strong {
		return correctable.InvokeStrong(ctx, b, op)
	}
	return correctable.InvokeWeak(ctx, b, op)
}

// Decoupling applications from storage (Correctables §4.1, Listing 2).
func Example_decoupling() {
	ctx := context.Background()
	cluster, _ := correctabletest.NewCluster(correctabletest.Config{})
	cluster.Put("messages:alice", "hi")
	_ = cluster.SetLag(correctabletest.BackupReplica, 1) // the backup misses the next write
	cluster.Put("messages:alice", "hi; lunch?")
	b := correctabletest.Sequential[string](cluster)

	for _, strong := range []bool{false, true} {
		v, err := userMessages(ctx, b, "alice", strong).Final(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("strong=%t: %q at %s\n", strong, v.Value, v.Level)
	}
	// Output:
	// strong=false: "hi" at eventual
	// strong=true: "hi; lunch?" at strong
}

// Ad serving with speculation (Correctables §4.2, Listing 4): fetch the ads
// for the preliminary references while the final ones are on their way.
func Example_adServing() {
	ctx := context.Background()
	// The primary answers once a fetch has begun: the final view comes
	// while the speculation on the preliminary one runs, as on a real
	// network, however busy the machine is.
	fetching := make(chan struct{}, 1)
	cluster, _ := correctabletest.NewCluster(correctabletest.Config{
		Wait: func(ctx context.Context, r correctabletest.Replica) error {
			if r != correctabletest.PrimaryReplica {
				return nil
			}
			select {
			case <-fetching:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	cluster.Put("adrefs:alice", "ad-1,ad-2")
	b := correctabletest.Sequential[string](cluster)

	var fetches atomic.Int32
	getAds := func(_ context.Context, refs string) ([]string, error) {
		fetches.Add(1)
		select {
		case fetching <- struct{}{}:
		default:
		}
		var ads []string
		for _, ref := range strings.Split(refs, ",") {
			ads = append(ads, "<"+ref+">") // fetch and post-process the ad
		}
		return ads, nil
	}
	abort := func(ads []string) { fmt.Println("  discarded", ads) }
	fetchAdsByUserID := func(uid string) *correctable.Correctable[[]string] {
		return correctable.Speculate(
			correctable.Invoke(ctx, b, correctabletest.Get("adrefs:"+uid)), getAds, abort)
	}

	for i, stale := range []bool{false, true} {
		if stale { // alice's interests changed; the backup has not seen it yet
			_ = cluster.SetLag(correctabletest.BackupReplica, 1)
			cluster.Put("adrefs:alice", "ad-7,ad-9")
		}
		fetches.Store(0)
		fmt.Printf("request %d:\n", i+1)
		ads, err := fetchAdsByUserID("alice").Final(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("  deliver %v at %s after %d fetches\n", ads.Value, ads.Level, fetches.Load())
	}
	// Output:
	// request 1:
	//   deliver [<ad-1> <ad-2>] at strong after 1 fetches
	// request 2:
	//   discarded [<ad-1> <ad-2>]
	//   deliver [<ad-7> <ad-9>] at strong after 2 fetches
}

// dequeue takes a ticket from the stock and returns its number (the stock
// before it was taken), or 0 when sold out. At the backup it is simulated.
func dequeue(event string) correctabletest.Op[int] {
	return func(kv correctabletest.KV) int {
		s, _ := kv.Get("tickets:" + event)
		n, _ := strconv.Atoi(s)
		if n == 0 {
			return 0
		}
		kv.Put("tickets:"+event, strconv.Itoa(n-1))
		return n
	}
}

// Selling tickets with a threshold (Correctables §4.3, Listing 5): buy on
// the preliminary view while many tickets are left, wait for the final
// view near the end.
func Example_ticketSelling() {
	const threshold = 20
	ctx := context.Background()
	wait, attached := heldUntilCallbacks(correctabletest.BackupReplica)
	cluster, _ := correctabletest.NewCluster(correctabletest.Config{Wait: wait})
	cluster.Put("tickets:concert", "22")
	b := correctabletest.Sequential[int](cluster)

	purchaseTicket := func(event string) {
		done := false
		closed := make(chan struct{})
		correctable.Invoke(ctx, b, dequeue(event)).SetCallbacks(correctable.Callbacks[int]{
			OnUpdate: func(weak correctable.View[int]) {
				if weak.Value > threshold {
					done = true // many tickets left, so we can buy
					fmt.Printf("ticket %d: confirmed on the %s view\n", weak.Value, weak.Level)
				}
			},
			OnFinal: func(strong correctable.View[int]) {
				defer close(closed)
				switch {
				case done:
				case strong.Value != 0:
					fmt.Printf("ticket %d: confirmed on the %s view\n", strong.Value, strong.Level)
				default:
					fmt.Println("sold out, sorry!")
				}
			},
			OnError: func(err error) { fmt.Println(err); close(closed) },
		})
		attached()
		<-closed
	}

	for range 3 {
		purchaseTicket("concert")
	}
	cluster.Put("tickets:concert", "0")
	purchaseTicket("concert")
	// Output:
	// ticket 22: confirmed on the eventual view
	// ticket 21: confirmed on the eventual view
	// ticket 20: confirmed on the strong view
	// sold out, sorry!
}

// Progressive display of news (Correctables §4.4, Listing 6): three views,
// from the phone's cache, the closest backup and the primary.
func Example_newsReader() {
	ctx := context.Background()
	wait, attached := heldUntilCallbacks(correctabletest.CacheReplica)
	cluster, _ := correctabletest.NewCluster(correctabletest.Config{WithCache: true, Wait: wait})
	_ = cluster.SetLag(correctabletest.CacheReplica, 2)
	_ = cluster.SetLag(correctabletest.BackupReplica, 1)
	cluster.Put("news", "storm warning")
	cluster.Put("news", "storm warning|match result")
	cluster.Put("news", "storm warning|match result|election called")
	b := correctabletest.Sequential[string](cluster)

	closed := make(chan struct{})
	refreshDisplay := func(items correctable.View[string]) {
		fmt.Printf("%-8s %s\n", items.Level, strings.ReplaceAll(items.Value, "|", ", "))
	}
	correctable.Invoke(ctx, b, correctabletest.Get("news")).SetCallbacks(correctable.Callbacks[string]{
		OnUpdate: refreshDisplay,
		OnFinal:  func(items correctable.View[string]) { refreshDisplay(items); close(closed) },
		OnError:  func(err error) { fmt.Println(err); close(closed) },
	})
	attached()
	<-closed
	// Output:
	// cache    storm warning
	// eventual storm warning, match result
	// strong   storm warning, match result, election called
}

// heldUntilCallbacks returns a correctabletest.Config.Wait that holds
// each request to first, the replica the sequential binding asks first,
// until attached is called, once per request. SetCallbacks starts a
// subscriber from the newest view already there and skips older ones
// (still correct, only later): a final view, or a second preliminary one,
// that arrived before SetCallbacks would hide the views before it. Holding
// the first replica keeps every view after SetCallbacks, so the examples'
// output does not depend on scheduling.
func heldUntilCallbacks(first correctabletest.Replica) (wait func(context.Context, correctabletest.Replica) error, attached func()) {
	ch := make(chan struct{}, 1)
	wait = func(ctx context.Context, r correctabletest.Replica) error {
		if r != first {
			return nil
		}
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return wait, func() { ch <- struct{}{} }
}
