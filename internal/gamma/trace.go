package gamma

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/correctables/correctables/client"
)

// TraceHeader is the first line of a trace file.
//
// A trace file is text, one operation per line after the header:
//
//	w|r KEY VALUE START FINISH weak|strong
//
// w for a write, r for a read; KEY a Go-quoted string; VALUE the value's
// 64-bit hash in hex (16 digits), or - for a read that found no key;
// START and FINISH in nanoseconds (Unix time for the client's recorder);
// the level the operation ran at. Lines starting with # are comments.
const TraceHeader = "# correctables trace v1: w|r key value start_ns finish_ns level"

// MaxTraceLine bounds a line of a trace file (a key is at most 4 KiB,
// quoted at most four times as long).
const MaxTraceLine = 64 << 10

// WriteTrace writes ops as a trace file.
func WriteTrace(w io.Writer, ops []Op) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, TraceHeader)
	for _, o := range ops {
		kind, val, level := "r", "-", "weak"
		if o.Write {
			kind = "w"
		}
		if o.Value != Absent {
			val = fmt.Sprintf("%016x", o.Value)
		}
		if o.Strong {
			level = "strong"
		}
		fmt.Fprintf(bw, "%s %s %s %d %d %s\n", kind, strconv.Quote(o.Key), val, o.Start, o.Finish, level)
	}
	return bw.Flush()
}

// ReadTrace reads a trace file. It fails, with the line number, on the
// first malformed line.
func ReadTrace(r io.Reader) ([]Op, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxTraceLine)
	var ops []Op
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		if n == 1 && line != TraceHeader {
			return nil, fmt.Errorf("%w: line 1: not a trace file (want the header %q)", ErrBadTrace, TraceHeader)
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		o, err := parseLine(line)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %w", ErrBadTrace, n, err)
		}
		ops = append(ops, o)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%w: line %d: longer than %d bytes", ErrBadTrace, n+1, MaxTraceLine)
		}
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: empty file (want the header %q)", ErrBadTrace, TraceHeader)
	}
	return ops, nil
}

func parseLine(line string) (Op, error) {
	var o Op
	switch {
	case strings.HasPrefix(line, "w "):
		o.Write = true
	case strings.HasPrefix(line, "r "):
	default:
		return o, errors.New("want w or r first")
	}
	rest := line[2:]
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return o, errors.New("want a quoted key")
	}
	if o.Key, err = strconv.Unquote(q); err != nil {
		return o, fmt.Errorf("key: %w", err)
	}
	f := strings.Fields(rest[len(q):])
	if len(f) != 4 {
		return o, fmt.Errorf("want key, value, start, finish and level; got %d fields after the key", len(f))
	}
	if f[0] != "-" {
		if len(f[0]) != 16 {
			return o, fmt.Errorf("value %q: want 16 hex digits or -", f[0])
		}
		if o.Value, err = strconv.ParseUint(f[0], 16, 64); err != nil {
			return o, fmt.Errorf("value %q: want 16 hex digits or -", f[0])
		}
		if o.Value == Absent {
			return o, errors.New("value 0000000000000000: write - for no value")
		}
	}
	if o.Write && o.Value == Absent {
		return o, errors.New("a write of no value")
	}
	if o.Start, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return o, fmt.Errorf("start %q: want nanoseconds", f[1])
	}
	if o.Finish, err = strconv.ParseInt(f[2], 10, 64); err != nil {
		return o, fmt.Errorf("finish %q: want nanoseconds", f[2])
	}
	if o.Finish < o.Start {
		return o, fmt.Errorf("finish %d before start %d", o.Finish, o.Start)
	}
	switch f[3] {
	case "weak":
	case "strong":
		o.Strong = true
	default:
		return o, fmt.Errorf("level %q: want weak or strong", f[3])
	}
	return o, nil
}

// FromRecords converts the records of a client.TraceRecorder to operations.
func FromRecords(recs []client.TraceRecord) []Op {
	ops := make([]Op, len(recs))
	for i, r := range recs {
		ops[i] = Op{Key: r.Key, Write: r.Write, Value: r.Value, Start: r.Start, Finish: r.Finish, Strong: r.Strong}
	}
	return ops
}
