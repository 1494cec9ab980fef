package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log"
	"net"
	"os"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// Example dials a replica, writes strongly, and reads with both views: the
// preliminary one at once, then the final one, which here only confirms it.
func Example() {
	endpoint, stop := replica() // a real program dials `correctables up`'s endpoints
	defer stop()
	ctx := context.Background()

	c, err := client.Dial(ctx, []string{endpoint})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, err := c.InvokeStrong(ctx, client.Put("alice", []byte("42"))).Final(ctx); err != nil {
		log.Fatal(err)
	}
	v, err := c.Get(ctx, "alice").Final(ctx) // levels Eventual, then Strong
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s at %v, confirmed: %v\n", v.Value.Value, v.Level, v.Confirmed)
	// Output: 42 at strong, confirmed: true
}

// ExampleClient_Invoke speculates on the preliminary view of a read: the
// work starts at once and its result is delivered as soon as the final view
// confirms the value it ran on (Correctables §4.2).
func ExampleClient_Invoke() {
	endpoint, stop := replica()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{endpoint})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	if _, err := c.InvokeStrong(ctx, client.Put("ads/alice", []byte("shoes"))).Final(ctx); err != nil {
		log.Fatal(err)
	}
	fetchAd := func(_ context.Context, r client.Result) (string, error) {
		return "ad for " + string(r.Value), nil // the expensive part
	}
	ad := correctable.SpeculateFunc(c.Invoke(ctx, client.Get("ads/alice")), client.Result.Equal, fetchAd, nil)
	v, err := ad.Final(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(v.Value)
	// Output: ad for shoes
}

// ExampleClient_Incr reads the preliminary and final views of an increment
// as they arrive, and the operation's error code from the result.
func ExampleClient_Incr() {
	endpoint, stop := replica()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{endpoint})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for range 2 {
		if _, err := c.Incr(ctx, "visits", 1).Final(ctx); err != nil {
			log.Fatal(err)
		}
	}
	v, _ := c.Incr(ctx, "visits", 1).Final(ctx)
	fmt.Println("visits:", v.Value.Int)

	if _, err := c.Put(ctx, "name", []byte("bob"), correctable.Strong).Final(ctx); err != nil {
		log.Fatal(err)
	}
	v, _ = c.Incr(ctx, "name", 1, correctable.Strong).Final(ctx)
	fmt.Println(v.Value.Err)
	// Output:
	// visits: 3
	// client: value is not an integer
}

// ExampleClient_Stats measures what incremental views cost on the wire
// (Correctables §5.2).
func ExampleClient_Stats() {
	endpoint, stop := replica()
	defer stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{endpoint})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for i := range 10 {
		c.Get(ctx, "k"+strconv.Itoa(i)).Final(ctx)
	}
	s := c.Stats()
	fmt.Printf("%d ops, %d views, %d confirmations\n", s.Ops, s.Views, s.Confirmations)
	// Output: 10 ops, 20 views, 10 confirmations
}

// ExampleClient_Dequeue is the ticket seller of Correctables §4.3: sell at
// once on the preliminary view when many tickets are left, else wait for the
// final view.
func ExampleClient_Dequeue() {
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{"localhost:7001", "localhost:7002", "localhost:7003"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	const threshold = 100
	sold := false
	c.Dequeue(ctx, "event-42/tickets").SetCallbacks(correctable.Callbacks[client.Result]{
		OnUpdate: func(v correctable.View[client.Result]) {
			if v.Value.OK && v.Value.Len > threshold {
				sold = true // many tickets left: the final view will agree
				fmt.Println("sold ticket", v.Value.Int)
			}
		},
		OnFinal: func(v correctable.View[client.Result]) {
			if !sold && v.Value.OK {
				fmt.Println("sold ticket", v.Value.Int)
			}
		},
		OnError: func(err error) { log.Print(err) },
	})
}

// ExampleDial_tls connects to replicas that are not on loopback, over TLS:
// the replicas' certificates are verified against the cluster's CA, and the
// client presents its own certificate (mutual TLS; required by replicas run
// with --client-cert-auth). The files are those `correctables cert` makes.
func ExampleDial_tls() {
	ctx := context.Background()
	caPEM, err := os.ReadFile("certs/ca.crt")
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		log.Fatal("certs/ca.crt: no certificate")
	}
	cert, err := tls.LoadX509KeyPair("certs/client.root.crt", "certs/client.root.key")
	if err != nil {
		log.Fatal(err)
	}
	creds := credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: roots, Certificates: []tls.Certificate{cert}})
	c, err := client.Dial(ctx, []string{"replica-1.example:7001", "replica-2.example:7001"},
		client.WithTransportCredentials(creds))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for _, e := range c.Endpoints() {
		fmt.Println(e.Address, e.RTT, e.Healthy)
	}
}

// replica starts a stand-in for one replica of the store on loopback: a
// map behind the Store service, whose final view always confirms the
// preliminary one. It knows get, put and incr.
func replica() (endpoint string, stop func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterStoreServer(s, &mapStore{kv: map[string][]byte{}})
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(lis) }()
	return lis.Addr().String(), func() { s.Stop(); <-done }
}

type mapStore struct {
	api.UnimplementedStoreServer
	mu sync.Mutex
	kv map[string][]byte
}

func (m *mapStore) Status(context.Context, *api.StatusRequest) (*api.StatusReply, error) {
	return &api.StatusReply{Id: 1}, nil
}

func (m *mapStore) Invoke(req *api.InvokeRequest, stream grpc.ServerStreamingServer[api.ViewReply]) error {
	m.mu.Lock()
	op, r := req.GetOp(), &api.Result{}
	old, found := m.kv[op.GetKey()]
	switch op.GetKind() {
	case api.Kind_KIND_GET:
		r.Found, r.Value = found, old
	case api.Kind_KIND_PUT:
		r.Found, r.Value = found, old
		m.kv[op.GetKey()] = op.GetValue()
	case api.Kind_KIND_INCR:
		n, err := strconv.ParseInt(string(old), 10, 64)
		if found && err != nil {
			r.Err = 6 // not an integer
			break
		}
		r.Found, r.Int = found, n+op.GetDelta()
		m.kv[op.GetKey()] = []byte(strconv.FormatInt(r.Int, 10))
	}
	m.mu.Unlock()
	if req.GetPreliminary() {
		if err := stream.Send(&api.ViewReply{Final: !req.GetFinal(), Result: r}); err != nil {
			return err
		}
	}
	if req.GetFinal() {
		if req.GetPreliminary() {
			return stream.Send(&api.ViewReply{Final: true, Confirmed: true})
		}
		return stream.Send(&api.ViewReply{Final: true, Result: r})
	}
	return nil
}
