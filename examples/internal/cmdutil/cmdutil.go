// Package cmdutil is what the example commands (examples/cmd) share:
// connecting to a running cluster, and timing an application's speculative
// reads against strong-only ones.
package cmdutil

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/examples/store"
)

// Endpoints are the client endpoints of the cluster `correctables up`
// starts.
const Endpoints = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"

// Dial connects to the replicas at endpoints (comma-separated) within a
// context of five minutes, and returns that context and the store binding
// of the client; done closes the client and ends the context. It exits
// the program on an error.
func Dial(endpoints string) (ctx context.Context, b store.Binding, done func()) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	c, err := client.Dial(ctx, strings.Split(endpoints, ","))
	if err != nil {
		log.Fatal(err)
	}
	return ctx, store.Client(c), func() { c.Close(); cancel() }
}

// Compare reads each of users' data twice, first speculating on the
// preliminary view (spec), then waiting for the final view first (strong),
// and prints a line per user: the n items (named by items) spec returned,
// both latencies and spec's note; then the mean latencies. It exits the
// program on an error.
func Compare(users int, items string, spec func(user int) (n int, note string, err error), strong func(user int) error) {
	var specSum, strongSum time.Duration
	for u := range users {
		start := time.Now()
		n, note, err := spec(u)
		if err != nil {
			log.Fatal(err)
		}
		ts := time.Since(start)
		start = time.Now()
		if err := strong(u); err != nil {
			log.Fatal(err)
		}
		tw := time.Since(start)
		specSum, strongSum = specSum+ts, strongSum+tw
		fmt.Printf("user %3d: %2d %s  speculative %7.1fms  strong-only %7.1fms%s\n", u, n, items, Ms(ts), Ms(tw), note)
	}
	fmt.Printf("\nmean: speculative %.1fms, strong-only %.1fms\n", Ms(specSum)/float64(users), Ms(strongSum)/float64(users))
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
