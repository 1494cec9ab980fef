package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// profileEnv names a directory: with it set, every replica a test starts
// serves its debug listener (serve --metrics) and the harness keeps taking
// 5 s CPU profiles of each into that directory, named by replica and the
// profile's start time, for as long as the test runs. It is how a slow
// loop round that a soak logged is traced to its cause afterwards. With
// CORRECTABLES_E2E_PROFILE_TRACE set too, they are 5 s execution traces
// (go tool trace; -pprof=sched shows where a goroutine waited to run).
const profileEnv = "CORRECTABLES_E2E_PROFILE"

// profileCluster starts the profile takers of c's replicas if profileEnv
// is set.
func profileCluster(t *testing.T, c *cluster) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ports := freePorts(t, len(c.procs))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, p := range c.procs {
		p.debug = ports[i]
		wg.Go(func() { takeProfiles(ctx, dir, p) })
	}
	t.Logf("CPU profiles of every replica into %s", dir)
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// takeProfiles takes back-to-back CPU profiles of p while it runs.
func takeProfiles(ctx context.Context, dir string, p *proc) {
	for ctx.Err() == nil {
		start := time.Now()
		kind, ext := "profile", "pprof"
		if os.Getenv("CORRECTABLES_E2E_PROFILE_TRACE") != "" {
			kind, ext = "trace", "trace"
		}
		url := fmt.Sprintf("http://%s/debug/pprof/%s?seconds=5", p.debug, kind)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			time.Sleep(100 * time.Millisecond) // down or starting
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			continue
		}
		name := fmt.Sprintf("r%d-%s.%s", p.id, start.UTC().Format("150405.000"), ext)
		_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
}
