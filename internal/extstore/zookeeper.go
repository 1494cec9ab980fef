package extstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeperJar is where Debian's zookeeper package installs the server
// (its manifest names the other jars it needs).
const ZooKeeperJar = "/usr/share/java/zookeeper.jar"

// ZooKeeper is a running ZooKeeper ensemble.
type ZooKeeper struct {
	// Servers are the servers' client addresses (host:port), server 1
	// first.
	Servers []string
	group
}

// StartZooKeeper starts an ensemble of n servers (java, Debian's
// zookeeper package) with their configuration and data under dir, and
// returns once a write succeeds. The servers do not fsync (forceSync=no):
// they are for tests and measurements on one machine.
func StartZooKeeper(ctx context.Context, dir string, n int) (*ZooKeeper, error) {
	return retry(ctx, dir, func(dir string) (*ZooKeeper, error) { return startZooKeeper(ctx, dir, n) })
}

func startZooKeeper(ctx context.Context, dir string, n int) (*ZooKeeper, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("extstore: zookeeper needs java: %w: %w", ErrNotInstalled, err)
	}
	if _, err := os.Stat(ZooKeeperJar); err != nil {
		return nil, fmt.Errorf("extstore: zookeeper: %w: %w", ErrNotInstalled, err)
	}
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	z := &ZooKeeper{}
	var servers []string
	for i := range n {
		servers = append(servers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", i+1, ports[3*i+1], ports[3*i+2]))
		z.Servers = append(z.Servers, fmt.Sprintf("127.0.0.1:%d", ports[3*i]))
	}
	for i := range n {
		sdir := filepath.Join(dir, fmt.Sprintf("zk%d", i+1))
		data := filepath.Join(sdir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			z.Stop()
			return nil, fmt.Errorf("extstore: %w", err)
		}
		cfg := strings.Join(append([]string{
			"tickTime=200",
			"initLimit=50",
			"syncLimit=25",
			"dataDir=" + data,
			fmt.Sprintf("clientPort=%d", ports[3*i]),
			"clientPortAddress=127.0.0.1",
			"admin.enableServer=false",
			"forceSync=no",
			"maxClientCnxns=0",
		}, servers...), "\n") + "\n"
		if err := os.WriteFile(filepath.Join(sdir, "zoo.cfg"), []byte(cfg), 0o644); err != nil {
			z.Stop()
			return nil, fmt.Errorf("extstore: %w", err)
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintf("%d\n", i+1)), 0o644); err != nil {
			z.Stop()
			return nil, fmt.Errorf("extstore: %w", err)
		}
		p, err := start(sdir, filepath.Join(sdir, "server.log"), java, "-Xmx256m", "-XX:+UseSerialGC",
			"-cp", sdir+":"+ZooKeeperJar, "org.apache.zookeeper.server.quorum.QuorumPeerMain", filepath.Join(sdir, "zoo.cfg"))
		if err != nil {
			z.Stop()
			return nil, err
		}
		z.procs = append(z.procs, p)
	}
	if err := z.wait(ctx); err != nil {
		z.Stop()
		return nil, err
	}
	return z, nil
}

// wait returns once every server answers and the ensemble accepts a write.
func (z *ZooKeeper) wait(ctx context.Context) error {
	for _, s := range z.Servers {
		conn, _, err := zk.Connect([]string{s}, 10*time.Second, zk.WithLogger(nopLogger{}))
		if err != nil {
			return fmt.Errorf("extstore: zookeeper: %w", err)
		}
		for {
			_, err = conn.Create("/extstore-ready", nil, 0, zk.WorldACL(zk.PermAll))
			if err == nil || errors.Is(err, zk.ErrNodeExists) {
				break
			}
			if perr := z.exited(); perr != nil {
				conn.Close()
				return perr
			}
			select {
			case <-ctx.Done():
				conn.Close()
				return fmt.Errorf("extstore: zookeeper at %s not ready: %w (last: %v)", s, ctx.Err(), err)
			case <-time.After(100 * time.Millisecond):
			}
		}
		conn.Close()
	}
	return nil
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}
