package extstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a running Redis primary with replicas.
type Redis struct {
	// Primary is the primary's address, Replicas the replicas' (host:port).
	Primary  string
	Replicas []string
	group
}

// StartRedis starts a primary and n replicas (redis-server from Debian's
// package) with their files under dir, without persistence, and returns
// once every replica is online at the primary.
func StartRedis(ctx context.Context, dir string, replicas int) (*Redis, error) {
	return retry(ctx, dir, func(dir string) (*Redis, error) { return startRedis(ctx, dir, replicas) })
}

func startRedis(ctx context.Context, dir string, replicas int) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("extstore: %w: %w", ErrNotInstalled, err)
	}
	ports, err := freePorts(1 + replicas)
	if err != nil {
		return nil, err
	}
	r := &Redis{Primary: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	for i, port := range ports {
		sdir := filepath.Join(dir, fmt.Sprintf("redis%d", i))
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			r.Stop()
			return nil, fmt.Errorf("extstore: %w", err)
		}
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", sdir,
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no"}
		if i > 0 {
			args = append(args, "--replicaof", "127.0.0.1", strconv.Itoa(ports[0]))
			r.Replicas = append(r.Replicas, fmt.Sprintf("127.0.0.1:%d", port))
		}
		p, err := start(sdir, filepath.Join(sdir, "server.log"), bin, args...)
		if err != nil {
			r.Stop()
			return nil, err
		}
		r.procs = append(r.procs, p)
	}
	if err := r.wait(ctx, replicas); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// wait returns once the primary reports every replica online.
func (r *Redis) wait(ctx context.Context, replicas int) error {
	c := redis.NewClient(&redis.Options{Addr: r.Primary, MaxRetries: -1})
	defer c.Close()
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Count(info, "state=online") == replicas {
			return nil
		}
		if perr := r.exited(); perr != nil {
			return perr
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("extstore: redis replicas not online: %w (last: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
