// Package tickets is the ticket-selling application of Correctables (§4.3,
// Listing 5; evaluated in §6.3.2): an organiser enqueues an event's tickets
// and retailers dequeue them. Tickets carry no seat, so which ticket a
// purchase gets does not matter, only that one is left: while the
// preliminary view of a dequeue says more than Threshold tickets remain, the
// purchase is confirmed at once; for the last ones the retailer waits for
// the final, atomic view, so no ticket is sold twice and the event is never
// oversold.
//
//	def purchaseTicket(eventID):
//	    done = false
//	    invoke(dequeue(eventID)).setCallbacks(
//	        onUpdate = (weakResult) =>
//	            if weakResult.ticketNr > THRESHOLD:
//	                done = true  # many tickets left, so we can buy
//	                confirmPurchase()
//	        onFinal = (strongResult) =>
//	            if not done and strongResult is not null:
//	                confirmPurchase()  # we managed to get a ticket
//	            else: display("Sold out. Sorry!"))
//
// The ticket a purchase holds is the one its final view took: the
// preliminary view only decides how early the purchase is confirmed. It is
// written against a store.Binding, so it runs on any store with a queue.
package tickets

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/correctables/correctables/correctable"
	"github.com/correctables/correctables/examples/store"
)

// Purchase is the outcome of one purchase.
type Purchase struct {
	// Sold: the customer was told they have a ticket. Early: that was
	// decided on the preliminary view.
	Sold, Early bool
	// Ticket is the ticket the final view took ("" if none).
	Ticket string
	// Revoked: confirmed early, but the final view found the queue empty
	// (an oversold ticket). A preliminary view overcounts what is left by
	// the dequeues its replica has not seen yet (in flight elsewhere, or
	// not yet received), so this stays rare only while the threshold is
	// well above that number.
	Revoked bool
	// Left is how many tickets the deciding view said remained.
	Left int64
	// Latency is the time until the customer was answered; Final the time
	// until the final view.
	Latency, Final time.Duration
}

// Stats counts what a Retailer did.
type Stats struct {
	Purchases, Sold, Early, SoldOut, Revoked uint64
}

// Retailer sells tickets from one event's queue.
type Retailer struct {
	b     store.Binding
	event string
	// Threshold: the last Threshold tickets are sold on final views only;
	// while a preliminary view says at least Threshold tickets remain after
	// the one it took, the purchase is confirmed on it (Listing 5's
	// THRESHOLD; 20 in §6.3.2). Threshold 0 confirms every purchase whose
	// preliminary view took a ticket, which can oversell; a threshold larger
	// than the stock always waits for the final view.
	Threshold int64

	purchases, sold, early, soldOut, revoked atomic.Uint64
}

// NewRetailer returns a retailer of event's tickets on binding b.
func NewRetailer(b store.Binding, event string, threshold int64) *Retailer {
	return &Retailer{b: b, event: event, Threshold: threshold}
}

// QueueKey is the queue of event's tickets.
func QueueKey(event string) string { return "tickets:" + event }

// Stats returns the counts so far.
func (r *Retailer) Stats() Stats {
	return Stats{Purchases: r.purchases.Load(), Sold: r.sold.Load(), Early: r.early.Load(),
		SoldOut: r.soldOut.Load(), Revoked: r.revoked.Load()}
}

// Purchase buys one ticket (Listing 5) and returns when the final view is
// in; Latency says when the customer was answered.
func (r *Retailer) Purchase(ctx context.Context) (Purchase, error) {
	r.purchases.Add(1)
	start := time.Now()
	var p Purchase
	c := correctable.Invoke(ctx, r.b, store.Dequeue(QueueKey(r.event)))
	for v := range c.Views() {
		if v.Value.Err != nil {
			return p, fmt.Errorf("tickets: dequeue: %w", v.Value.Err)
		}
		if !v.Final {
			// onUpdate: many tickets left (at least Threshold after this one), so we can buy.
			if !p.Sold && v.Value.OK && v.Value.Left >= r.Threshold {
				p.Sold, p.Early, p.Left, p.Latency = true, true, v.Value.Left, time.Since(start)
			}
			continue
		}
		// onFinal.
		p.Final = time.Since(start)
		if v.Value.OK {
			p.Ticket = string(v.Value.Value)
		}
		switch {
		case p.Early && !v.Value.OK:
			p.Revoked = true
		case !p.Early:
			p.Sold, p.Left, p.Latency = v.Value.OK, v.Value.Left, p.Final
		}
	}
	if err := c.Err(); err != nil {
		return p, fmt.Errorf("tickets: %w", err)
	}
	switch {
	case p.Revoked:
		r.revoked.Add(1)
	case p.Sold:
		r.sold.Add(1)
		if p.Early {
			r.early.Add(1)
		}
	default:
		r.soldOut.Add(1)
	}
	return p, nil
}

// Stock enqueues tickets 1 to n of event with final views, one at a time
// (in order), and returns their names.
func Stock(ctx context.Context, b store.Binding, event string, n int) ([]string, error) {
	if n < 0 {
		return nil, fmt.Errorf("tickets: a stock of %d tickets", n)
	}
	names := make([]string, n)
	for i := range n {
		names[i] = event + "#" + strconv.Itoa(i+1)
		if _, err := store.Final(ctx, b, store.Enqueue(QueueKey(event), []byte(names[i]))); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// Check reports what is wrong with a sale of stock to purchases: a ticket
// sold twice, a ticket sold that was not in stock, a ticket of the stock
// neither sold nor left (lost), a purchase answered "sold" without a ticket
// (oversold), a ticket taken by a purchase answered "sold out". left is what
// remained in the queue after the sale. It returns nil when every ticket of
// the stock was sold exactly once or is left.
func Check(stock []string, purchases []Purchase, left []string) error {
	in := make(map[string]bool, len(stock))
	for _, t := range stock {
		in[t] = true
	}
	seen := make(map[string]int, len(stock))
	var errs []string
	for i, p := range purchases {
		switch {
		case p.Revoked || (p.Sold && p.Ticket == ""):
			errs = append(errs, fmt.Sprintf("purchase %d answered sold without a ticket", i))
		case !p.Sold && p.Ticket != "":
			errs = append(errs, fmt.Sprintf("purchase %d answered sold out but took %s", i, p.Ticket))
		}
		if p.Ticket == "" {
			continue
		}
		if !in[p.Ticket] {
			errs = append(errs, fmt.Sprintf("purchase %d got %q, not in stock", i, p.Ticket))
		}
		seen[p.Ticket]++
	}
	for _, t := range left {
		seen[t]++
	}
	for _, t := range stock {
		switch n := seen[t]; {
		case n == 0:
			errs = append(errs, fmt.Sprintf("ticket %s lost", t))
		case n > 1:
			errs = append(errs, fmt.Sprintf("ticket %s sold or left %d times", t, n))
		}
	}
	if len(errs) > 10 {
		errs = append(errs[:10], fmt.Sprintf("and %d more", len(errs)-10))
	}
	if len(errs) > 0 {
		return fmt.Errorf("tickets: %d problems: %v", len(errs), errs)
	}
	return nil
}

// Drain dequeues what is left of event's tickets with final views and
// returns it.
func Drain(ctx context.Context, b store.Binding, event string) ([]string, error) {
	var left []string
	for {
		r, err := store.Final(ctx, b, store.Dequeue(QueueKey(event)))
		if err != nil {
			return left, err
		}
		if !r.OK {
			return left, nil
		}
		left = append(left, string(r.Value))
	}
}

// SellOut runs retailers rs concurrently, each purchasing until the event
// is sold out, and returns every purchase (each retailer's last one is its
// sold-out attempt). each, if set, is called with the retailer's index in
// rs and each purchase, one call at a time. A retailer whose purchase fails
// stops; the failures are joined.
func SellOut(ctx context.Context, rs []*Retailer, each func(i int, p Purchase)) ([]Purchase, error) {
	var (
		mu   sync.Mutex
		all  []Purchase
		errs = make([]error, len(rs))
		wg   sync.WaitGroup
	)
	for i, r := range rs {
		wg.Go(func() {
			for {
				p, err := r.Purchase(ctx)
				if err != nil {
					errs[i] = err
					return
				}
				mu.Lock()
				all = append(all, p)
				if each != nil {
					each(i, p)
				}
				mu.Unlock()
				if !p.Sold {
					return
				}
			}
		})
	}
	wg.Wait()
	return all, errors.Join(errs...)
}
