package state

import "fmt"

// Limits bounds every input an op can carry (STYLE habit 9). A zero field
// means "use the default".
type Limits struct {
	// MaxKey is the maximum length in bytes of a key, queue name or scan prefix.
	MaxKey int
	// MaxValue is the maximum length in bytes of any value: put, CAS expected
	// and new values, enqueued items, guard values, txn writes, and the result
	// of an append.
	MaxValue int
	// MaxScan is the maximum number of items one scan returns; a scan with
	// Limit 0 returns up to MaxScan items.
	MaxScan int
	// MaxTxnOps is the maximum of len(Guards)+len(Then)+len(Else) in a
	// transaction.
	MaxTxnOps int
	// MaxOpBytes is the maximum of all keys and values of one operation
	// together (a transaction of many large writes): what one operation
	// may add to a log entry or a message between replicas.
	MaxOpBytes int
}

// Default limits.
const (
	DefaultMaxKey    = 4 << 10
	DefaultMaxValue  = 1 << 20
	DefaultMaxScan   = 1000
	DefaultMaxTxnOps = 128
	// DefaultMaxOpBytes fits a CAS of two maximal values, and stays well
	// under the 4 MiB log entries and gRPC messages.
	DefaultMaxOpBytes = 3 << 20
)

// DefaultLimits returns the default limits.
func DefaultLimits() Limits {
	return Limits{
		MaxKey:     DefaultMaxKey,
		MaxValue:   DefaultMaxValue,
		MaxScan:    DefaultMaxScan,
		MaxTxnOps:  DefaultMaxTxnOps,
		MaxOpBytes: DefaultMaxOpBytes,
	}
}

// EnsureDefaults replaces every zero field with its default.
func (l *Limits) EnsureDefaults() {
	d := DefaultLimits()
	if l.MaxKey == 0 {
		l.MaxKey = d.MaxKey
	}
	if l.MaxValue == 0 {
		l.MaxValue = d.MaxValue
	}
	if l.MaxScan == 0 {
		l.MaxScan = d.MaxScan
	}
	if l.MaxTxnOps == 0 {
		l.MaxTxnOps = d.MaxTxnOps
	}
	if l.MaxOpBytes == 0 {
		l.MaxOpBytes = d.MaxOpBytes
	}
}

// Validate reports a negative field. Zero fields are valid: they mean the
// default.
func (l Limits) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxKey", l.MaxKey}, {"MaxValue", l.MaxValue}, {"MaxScan", l.MaxScan}, {"MaxTxnOps", l.MaxTxnOps}, {"MaxOpBytes", l.MaxOpBytes}} {
		if f.v < 0 {
			return fmt.Errorf("%w: limits: %s is %d, must be >= 0", ErrBadArgs, f.name, f.v)
		}
	}
	return nil
}
