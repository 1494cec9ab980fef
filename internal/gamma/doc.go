// Package gamma measures how far a trace of reads and writes of registers
// (keys) deviates from linearizability with the Γ (Gamma) metric of Golab
// et al., in the per-value form that Continuous Partial Quorums (McKenzie,
// Fan, Golab, SCDM'15) §2 uses: one score per value written, the proportion
// of positive scores estimating the fraction of stale reads.
//
// # Definitions
//
// A trace is a set of operations, each on one key: a write of a value, or a
// read that returned a value (or found the key absent: the initial value).
// Values written to a key are unique (the trace records a 64-bit hash of
// each value). An operation has a start and a finish time; a precedes b if
// a finishes strictly before b starts (operations that touch are
// concurrent, as in porcupine).
//
// Γ-atomicity: a trace is Γ-atomic if it is linearizable once every start
// time moves Γ/2 earlier and every finish time Γ/2 later. Γ(trace) is the
// smallest such Γ; Γ = 0 exactly when the trace is linearizable.
//
// The cluster of value v is its write and the reads that returned v. Its
// zone runs between f, the earliest finish in the cluster, and s, the
// latest start: a forward zone [f, s] if f < s (some operation of v ended
// before another began), a backward zone [s, f] otherwise. By the zone
// theorem of Gibbons and Korach (used by Golab, Li and Shah, PODC'11), a
// trace with unique writes is linearizable if and only if (1) no read
// finishes before its value's write starts, (2) no two forward zones of a
// key overlap, and (3) no backward zone lies inside a forward zone of the
// same key.
//
// Widening every operation by Γ/2 on both sides moves f later and s
// earlier by Γ/2: the centre c = (f+s)/2 of a zone stays put and its signed
// length d = s-f shrinks by Γ. For two clusters of a key, conditions (2)
// and (3) together fail exactly when
//
//	g = (d1+d2)/2 - |c1-c2| > 0
//
// (two forward zones overlap, or a backward zone lies inside a forward
// one; two backward zones never conflict, and then g < 0), and widening
// lowers g by exactly Γ. So the pair needs Γ = g; a read of v that finishes
// x before v's write starts needs Γ = x. Γ of the trace is the largest of
// these, and is 0 exactly when none is positive.
//
// Per-value scores: a pair's score goes to the older of the two values
// (the one whose write started first: the value that was read after it
// had been overwritten), a precedence violation's to its own value; the
// score of a value is the largest it received, 0 if none. A read that
// returns a value overwritten x before the read started scores x (as long
// as the two writes are more than x apart: otherwise reordering the writes
// within Γ is cheaper). The proportion of positive scores, over all
// values written, is the stale fraction the CPQ paper reports; scores at
// or under a noise threshold (clock error across hosts, 2 ms in the paper)
// do not count.
//
// Score computes the scores of a whole trace; Online keeps a running
// estimate over a stream of operations, for a controller.
package gamma
