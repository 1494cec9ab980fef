package client

// QueuedCalls returns how many calls wait in c's batch queues, for tests
// that need operations to have queued before they let the one in flight
// return.
func QueuedCalls(c *Client) int {
	n := 0
	for _, e := range c.endpoints {
		for i := range e.batchers {
			b := &e.batchers[i]
			b.mu.Lock()
			n += len(b.queue)
			b.mu.Unlock()
		}
	}
	return n
}

// PipesOpen returns how many of c's endpoints have a pipe open, and how
// many were found not to implement Pipe.
func PipesOpen(c *Client) (open, unimplemented int) {
	for _, e := range c.endpoints {
		if p := e.pipe.Load(); p != nil && p.live() {
			open++
		}
		if e.noPipe.Load() {
			unimplemented++
		}
	}
	return open, unimplemented
}

// PipePending returns how many operations wait for their results in c's
// pipes.
func PipePending(c *Client) int {
	n := 0
	for _, e := range c.endpoints {
		if p := e.pipe.Load(); p != nil {
			p.mu.Lock()
			n += len(p.pending)
			p.mu.Unlock()
		}
	}
	return n
}
