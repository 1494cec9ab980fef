package tickets_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/correctables/correctables/examples/internal/exampletest"
	"github.com/correctables/correctables/examples/store"
	"github.com/correctables/correctables/examples/tickets"
)

// sell runs retailers, each with its own client of one replica, until the
// event is sold out, and returns every purchase.
func sell(t *testing.T, ctx context.Context, bs []store.Binding, event string, threshold int64) ([]tickets.Purchase, []*tickets.Retailer) {
	t.Helper()
	var rs []*tickets.Retailer
	for _, b := range bs {
		rs = append(rs, tickets.NewRetailer(b, event, threshold))
	}
	all, err := tickets.SellOut(ctx, rs, nil)
	if err != nil {
		t.Error(err)
	}
	return all, rs
}

// TestSellOut sells a stock with four retailers spread over the three
// replicas of a real cluster, with the threshold of Correctables §6.3.2 and
// with final views only: every ticket sold exactly once, none lost, early
// purchases only while at least the threshold remained.
func TestSellOut(t *testing.T) {
	c := exampletest.Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var bs []store.Binding
	for i := range 4 {
		bs = append(bs, exampletest.Binding(t, c.Endpoints[i%3:i%3+1]))
	}
	for _, tc := range []struct {
		event     string
		stock     int
		threshold int64
	}{{"concert", 60, 20}, {"opera", 30, 31}} {
		stock, err := tickets.Stock(ctx, bs[0], tc.event, tc.stock)
		if err != nil {
			t.Fatal(err)
		}
		purchases, rs := sell(t, ctx, bs, tc.event, tc.threshold)
		left, err := tickets.Drain(ctx, bs[0], tc.event)
		if err != nil {
			t.Fatal(err)
		}
		if err := tickets.Check(stock, purchases, left); err != nil {
			t.Fatalf("%s: %v", tc.event, err)
		}
		var sold, early, soldOut uint64
		for _, r := range rs {
			st := r.Stats()
			sold += st.Sold
			early += st.Early
			soldOut += st.SoldOut
			if st.Revoked != 0 {
				t.Fatalf("%s: %d purchases revoked", tc.event, st.Revoked)
			}
		}
		if sold != uint64(tc.stock) || len(left) != 0 || soldOut != uint64(len(bs)) {
			t.Fatalf("%s: sold %d of %d, %d left, %d told sold out", tc.event, sold, tc.stock, len(left), soldOut)
		}
		for _, p := range purchases {
			if p.Early && p.Left < tc.threshold {
				t.Fatalf("%s: early purchase with %d left, threshold %d", tc.event, p.Left, tc.threshold)
			}
		}
		if tc.threshold < int64(tc.stock) && early == 0 {
			t.Fatalf("%s: no purchase confirmed on a preliminary view", tc.event)
		}
		if tc.threshold >= int64(tc.stock) && early != 0 {
			t.Fatalf("%s: %d early purchases with a threshold above the stock", tc.event, early)
		}
	}
}

// TestCheck feeds Check sales that are wrong in each way it names.
func TestCheck(t *testing.T) {
	stock := []string{"e#1", "e#2", "e#3"}
	ok := []tickets.Purchase{{Sold: true, Ticket: "e#1"}, {Sold: true, Early: true, Ticket: "e#2"}, {}}
	if err := tickets.Check(stock, ok, []string{"e#3"}); err != nil {
		t.Fatalf("a correct sale: %v", err)
	}
	for _, tc := range []struct {
		name      string
		purchases []tickets.Purchase
		left      []string
		want      string
	}{
		{"twice", []tickets.Purchase{{Sold: true, Ticket: "e#1"}, {Sold: true, Ticket: "e#1"}}, []string{"e#2", "e#3"}, "2 times"},
		{"lost", []tickets.Purchase{{Sold: true, Ticket: "e#1"}}, []string{"e#3"}, "e#2 lost"},
		{"oversold", []tickets.Purchase{{Sold: true, Early: true, Revoked: true}}, stock, "without a ticket"},
		{"foreign", []tickets.Purchase{{Sold: true, Ticket: "x"}}, stock, "not in stock"},
		{"silent", []tickets.Purchase{{Ticket: "e#1"}}, []string{"e#2", "e#3"}, "sold out but took"},
	} {
		err := tickets.Check(stock, tc.purchases, tc.left)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}
