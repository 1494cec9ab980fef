package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/correctables/correctables/api"
)

// The debug listener (serve --metrics) serves Prometheus metrics, including
// the storage syncs and group-commit batch sizes, and Go profiles under
// /debug/pprof/ as etcd users expect.
func TestDebugListener(t *testing.T) {
	ports := freePorts(t, 2)
	addr, debug := ports[0], ports[1]
	out := &readyWriter{ready: make(chan struct{})}
	cmd := exec.Command(binary, "serve", "--id", "1", "--listen", addr, "--data", t.TempDir(),
		"--peers", "1="+addr, "--tick", tick, "--metrics", debug)
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	select {
	case <-out.ready:
	case <-time.After(startTimeout):
		t.Fatalf("no ready line in %v", startTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := dialAPI(t, addr)
	for {
		st, err := c.Invoke(ctx, &api.InvokeRequest{Op: &api.Op{Kind: api.Kind_KIND_PUT, Key: "k", Value: []byte("v")}, Final: true, Strong: true})
		if err == nil {
			if _, err = st.Recv(); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("strong put on a one-replica cluster: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	get := func(path string) string {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://%s%s", debug, path))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return string(b)
	}
	metrics := get("/metrics")
	for _, name := range []string{"correctables_storage_syncs_total", "correctables_storage_sync_seconds", "correctables_batch_size", "correctables_view_latency_seconds"} {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if idx := get("/debug/pprof/"); !strings.Contains(idx, "goroutine") {
		t.Errorf("/debug/pprof/ does not list the profiles: %.200s", idx)
	}
	if g := get("/debug/pprof/goroutine?debug=1"); !strings.Contains(g, "server.(*Server).loop") {
		t.Errorf("goroutine profile lacks the replica loop: %.200s", g)
	}
}

func dialAPI(t *testing.T, addr string) api.StoreClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return api.NewStoreClient(conn)
}
