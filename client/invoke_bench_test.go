package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/correctables/correctables/api"
	"github.com/correctables/correctables/client"
)

// BenchmarkInvokeWeakGet measures a weak get through the client, from
// InvokeWeak to its view, against a loopback server that answers at once
// with a stamped view: the client's cost per operation, with the server's
// gRPC cost in the same process (allocations too). 64 operations are outstanding.
func BenchmarkInvokeWeakGet(b *testing.B) {
	reply := &api.ViewReply{Final: true, Result: &api.Result{Found: true, Value: make([]byte, 100)}, Stamp: testStamp}
	// Like a replica, the server sends its cluster id, which the client
	// pins and sends back with every request.
	hdr := metadata.Pairs(api.ClusterIDMetadata, api.FormatClusterID(0x1234abcd5678ef90))
	f := &fakeStore{id: 1, script: func(_ *api.InvokeRequest, s grpc.ServerStreamingServer[api.ViewReply]) error {
		if err := s.SetHeader(hdr); err != nil {
			return err
		}
		return s.Send(reply)
	}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterStoreServer(s, f)
	go func() { _ = s.Serve(lis) }()
	defer s.Stop()
	ctx := context.Background()
	c, err := client.Dial(ctx, []string{lis.Addr().String()}, client.WithProbeInterval(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	op := client.Get("key")
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v, err := c.InvokeWeak(ctx, op).Final(ctx)
			if err != nil || !v.Value.Found {
				b.Errorf("view %+v, err %v", v, err)
				return
			}
		}
	})
}
