package extstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/correctables/correctables/internal/loadgen"
)

// Etcd is a running in-process etcd cluster.
type Etcd struct {
	// Endpoints are the members' client URLs, member 1 first.
	Endpoints []string
	members   []*embed.Etcd
}

// StartEtcd starts an etcd cluster of n members with their data under dir,
// and returns once it answers a linearizable read.
func StartEtcd(ctx context.Context, dir string, n int) (*Etcd, error) {
	return retry(ctx, dir, func(dir string) (*Etcd, error) { return startEtcd(ctx, dir, n) })
}

func startEtcd(ctx context.Context, dir string, n int) (*Etcd, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("e%d=http://127.0.0.1:%d", i+1, ports[2*i+1]))
	}
	e := &Etcd{}
	for i := range n {
		m, err := loadgen.StartEtcdMember(loadgen.EtcdMember{
			Name:           fmt.Sprintf("e%d", i+1),
			Dir:            filepath.Join(dir, fmt.Sprintf("e%d", i+1)),
			ClientURL:      fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:        fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			InitialCluster: strings.Join(initial, ","),
			Token:          "correctables-bindings",
		})
		if err != nil {
			e.Stop()
			return nil, fmt.Errorf("extstore: etcd member %d: %w", i+1, err)
		}
		e.members = append(e.members, m)
		e.Endpoints = append(e.Endpoints, fmt.Sprintf("127.0.0.1:%d", ports[2*i]))
	}
	for _, m := range e.members {
		select {
		case <-m.Server.ReadyNotify():
		case err := <-m.Err():
			e.Stop()
			return nil, fmt.Errorf("extstore: etcd: %w", err)
		case <-ctx.Done():
			e.Stop()
			return nil, fmt.Errorf("extstore: etcd not ready: %w", ctx.Err())
		}
	}
	if err := loadgen.WaitEtcd(ctx, e.Endpoints); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

// Stop stops every member.
func (e *Etcd) Stop() error {
	var errs []error
	for _, m := range e.members {
		m.Close()
		select {
		case <-m.Server.StopNotify():
		case <-time.After(10 * time.Second):
			errs = append(errs, errors.New("extstore: etcd member did not stop within 10s"))
		}
	}
	e.members = nil
	return errors.Join(errs...)
}
