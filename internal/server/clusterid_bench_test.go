package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/correctables/correctables/api"
)

// BenchmarkClientCluster measures the cluster-id check every client call
// goes through, with the incoming metadata a pinned client's Invoke
// carries.
func BenchmarkClientCluster(b *testing.B) {
	s := &Server{}
	s.cluster.id.Store(0x1234abcd5678ef90)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{
		":authority":            {"127.0.0.1:2379"},
		"content-type":          {"application/grpc"},
		"user-agent":            {"grpc-go/1.85.0"},
		"grpc-accept-encoding":  {"gzip"},
		api.ClusterIDMetadata:   {api.FormatClusterID(0x1234abcd5678ef90)},
		"correctables-client":   {"1"},
		"grpc-timeout":          {"9999m"},
		"correctables-replica-": {"x"},
	})
	var sent metadata.MD
	setHeader := func(md metadata.MD) error { sent = md; return nil }
	b.ReportAllocs()
	for b.Loop() {
		if err := s.clientCluster(ctx, setHeader); err != nil {
			b.Fatal(err)
		}
	}
	if got := sent.Get(api.ClusterIDMetadata); len(got) != 1 || got[0] != api.FormatClusterID(0x1234abcd5678ef90) {
		b.Fatalf("header %v", sent)
	}
}
