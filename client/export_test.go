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
