package client

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/correctables/correctables/api"
)

// The pin takes the first cluster id; a reply without one (an older server)
// is accepted and pins nothing; another id is a mismatch that is
// unavailable, not run when the request carried the pinned id.
func TestClusterPin(t *testing.T) {
	var p clusterPin
	hdr := func(id uint64) metadata.MD { return metadata.Pairs(api.ClusterIDMetadata, api.FormatClusterID(id)) }
	if err := p.check("e:1", nil, 0); err != nil || p.id.Load() != 0 {
		t.Fatalf("no id: %v, pinned %x", err, p.id.Load())
	}
	if err := p.check("e:1", hdr(7), 0); err != nil || p.id.Load() != 7 {
		t.Fatalf("first id: %v, pinned %x", err, p.id.Load())
	}
	if err := p.check("e:2", hdr(7), 7); err != nil {
		t.Fatalf("same id: %v", err)
	}
	if err := p.check("e:2", nil, 7); err != nil {
		t.Fatalf("no id after pinning: %v", err)
	}
	err := p.check("e:3", hdr(9), 7)
	var me *ClusterMismatchError
	if !errors.As(err, &me) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrClusterMismatch) ||
		me.Endpoint != "e:3" || me.Pinned != 7 || me.Got != 9 || !me.NotRun || !notRun(err) {
		t.Fatalf("other id: %v (%+v)", err, me)
	}
	if err := p.check("e:3", hdr(9), 0); !errors.Is(err, ErrClusterMismatch) || notRun(err) {
		t.Fatalf("other id, request without the pin: %v", err)
	}
	if err := p.check("e:4", metadata.Pairs(api.ClusterIDMetadata, "zz"), 7); !errors.Is(err, ErrProtocol) {
		t.Fatalf("malformed id: %v", err)
	}
	if p.id.Load() != 7 {
		t.Fatalf("pin changed to %x", p.id.Load())
	}
}

// A request carries the pinned id in its metadata, beside any metadata of
// the caller's context.
func TestClusterPinOutgoing(t *testing.T) {
	var p clusterPin
	if ctx, sent := p.outgoing(context.Background()); sent != 0 || ctx != context.Background() {
		t.Fatalf("nothing pinned: sent %x", sent)
	}
	p.id.Store(7)
	want := api.FormatClusterID(7)
	for name, ctx := range map[string]context.Context{
		"no metadata":  context.Background(),
		"appended":     metadata.AppendToOutgoingContext(context.Background(), "x-user", "u"),
		"new metadata": metadata.NewOutgoingContext(context.Background(), metadata.Pairs("x-user", "u")),
	} {
		for range 2 { // the second from the cached metadata
			out, sent := p.outgoing(ctx)
			md, _ := metadata.FromOutgoingContext(out)
			if got := md.Get(api.ClusterIDMetadata); sent != 7 || len(got) != 1 || got[0] != want {
				t.Fatalf("%s: sent %x, metadata %v; want the pinned id %s once", name, sent, md, want)
			}
			if _, caller := metadata.FromOutgoingContext(ctx); caller && len(md.Get("x-user")) != 1 {
				t.Fatalf("%s: the caller's metadata is lost: %v", name, md)
			}
			md.Set(api.ClusterIDMetadata, "changed") // a copy: the next request still carries the id
		}
	}
}
