package replica

// hlc is a hybrid logical clock (Kulkarni et al.): timestamps follow physical
// time where it can and never go backwards, and every timestamp a replica
// issues is above every timestamp it has seen. Creek orders tentative
// operations by timestamp, so skewed clocks cannot break the order, only make
// it differ more from the commit order (more rollbacks).
//
// A timestamp packs milliseconds since the Unix epoch in the high 48 bits and
// a logical counter in the low 16 bits.
type hlc struct {
	now  func() int64 // physical clock in nanoseconds, injected
	last uint64
}

const hlcLogicalBits = 16

func packTS(ms int64, logical uint64) uint64 {
	if ms < 0 {
		ms = 0
	}
	return uint64(ms)<<hlcLogicalBits | logical
}

// TSMillis returns the physical part of a timestamp in milliseconds.
func TSMillis(ts uint64) int64 { return int64(ts >> hlcLogicalBits) }

// Now issues a timestamp above every one issued or observed before.
func (c *hlc) Now() uint64 {
	phys := packTS(c.now()/1e6, 0)
	if phys > c.last {
		c.last = phys
	} else {
		// The logical counter absorbs bursts within one millisecond and
		// clocks behind what was observed; if it fills, the packed value
		// simply carries into the millisecond part, which keeps it monotonic.
		c.last++
	}
	return c.last
}

// Observe moves the clock past a timestamp received from another replica.
func (c *hlc) Observe(ts uint64) {
	if ts > c.last {
		c.last = ts
	}
}

// Peek returns the current reading without issuing a timestamp: every
// timestamp this clock issues later is above it.
func (c *hlc) Peek() uint64 {
	phys := packTS(c.now()/1e6, 0)
	if phys > c.last {
		return phys
	}
	return c.last
}
