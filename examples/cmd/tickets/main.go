// Command tickets sells an event's tickets with several retailers
// (Correctables Listing 5) on a running cluster: purchases are confirmed on
// the preliminary view of the dequeue while at least --threshold tickets
// remain, on the final view for the last ones. It prints each purchase and
// checks that every ticket was sold exactly once.
//
//	go run ./cmd/correctables up &
//	go run ./examples/cmd/tickets
//
// The same program runs unchanged on etcd, ZooKeeper or Redis through their
// bindings (examples/anystore), selected by --store:
//
//	go run ./examples/cmd/tickets --store etcd --endpoints 127.0.0.1:2379
//	go run ./examples/cmd/tickets --store zookeeper --endpoints 127.0.0.1:2181
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/correctables/correctables/examples/anystore"
	"github.com/correctables/correctables/examples/internal/cmdutil"
	"github.com/correctables/correctables/examples/tickets"
)

func main() {
	storeName := flag.String("store", "ours", "the store: "+strings.Join(anystore.Stores, ", "))
	endpoints := flag.String("endpoints", cmdutil.Endpoints, "the store's client endpoints, the nearest first (redis: the primary, then replicas)")
	stockN := flag.Int("stock", 100, "tickets in stock")
	retailers := flag.Int("retailers", 4, "retailers selling at once")
	threshold := flag.Int64("threshold", 20, "the last this many tickets are sold on final views only")
	flag.Parse()
	if *retailers < 1 || *stockN < 0 {
		log.Fatal("--retailers must be at least 1 and --stock not negative")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ops, closer, err := anystore.Open(ctx, anystore.Config{Store: *storeName, Endpoints: strings.Split(*endpoints, ",")})
	if err != nil {
		log.Fatal(err)
	}
	defer closer.Close()
	b := anystore.Ops(ops)
	event := fmt.Sprintf("event-%d", time.Now().UnixNano())
	stock, err := tickets.Stock(ctx, b, event, *stockN)
	if err != nil {
		log.Fatal(err)
	}
	rs := make([]*tickets.Retailer, *retailers)
	for i := range rs {
		rs[i] = tickets.NewRetailer(b, event, *threshold)
	}
	all, err := tickets.SellOut(ctx, rs, func(i int, p tickets.Purchase) {
		how := "final view"
		if p.Early {
			how = "preliminary view"
		}
		if p.Sold {
			fmt.Printf("retailer %d: sold %-16s in %6.1fms on the %s (%d left)\n", i, p.Ticket, cmdutil.Ms(p.Latency), how, p.Left)
		} else {
			fmt.Printf("retailer %d: sold out\n", i)
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	left, err := tickets.Drain(ctx, b, event)
	if err != nil {
		log.Fatal(err)
	}
	if err := tickets.Check(stock, all, left); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Printf("\n%d tickets, each sold exactly once; none lost\n", len(stock))
}
