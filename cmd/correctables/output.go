package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// valueSource resolves the value arguments of an operation: "-" is read
// from stdin (once per command), "@FILE" from FILE, "@@..." stands for a
// value that starts with "@"; anything else is the value itself. This is
// how a value larger than the command line allows (Linux: 128 KiB per
// argument) is sent.
type valueSource struct {
	stdin     io.Reader
	usedStdin bool
}

// maxValueInput bounds what a value argument reads: the client refuses
// larger requests anyway (client.MaxRequestBytes).
const maxValueInput = client.MaxRequestBytes

func (s *valueSource) value(arg string) ([]byte, error) {
	switch {
	case arg == "-":
		if s.usedStdin {
			return nil, errors.New("only one value can come from stdin (-)")
		}
		s.usedStdin = true
		if s.stdin == nil {
			s.stdin = os.Stdin
		}
		return readLimited(s.stdin, "stdin")
	case strings.HasPrefix(arg, "@@"):
		return []byte(arg[1:]), nil
	case strings.HasPrefix(arg, "@"):
		f, err := os.Open(arg[1:])
		if err != nil {
			return nil, fmt.Errorf("value %s: %w", arg, err)
		}
		defer f.Close()
		return readLimited(f, arg)
	}
	return []byte(arg), nil
}

func readLimited(r io.Reader, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxValueInput+1))
	if err != nil {
		return nil, fmt.Errorf("reading the value from %s: %w", what, err)
	}
	if len(b) > maxValueInput {
		return nil, fmt.Errorf("the value from %s is over %d bytes", what, maxValueInput)
	}
	return b, nil
}

// checkKey refuses an empty key before anything is sent; the server
// refuses it too.
func checkKey(what, key string) error {
	if key == "" {
		return fmt.Errorf("%s: empty key (a key is 1 to 4096 bytes)", what)
	}
	return nil
}

// negativeNumber matches an argument that is a negative number, which
// cobra would otherwise take for a flag (incr n -5).
var negativeNumber = regexp.MustCompile(`^-[0-9]+$`)

// parseKeepingNegatives parses cmd's flags (for a command with
// DisableFlagParsing) and returns the positional arguments, negative
// numbers among them where they stood. "--" still ends the flags.
func parseKeepingNegatives(cmd *cobra.Command, args []string) ([]string, error) {
	const mark = "\x00neg"
	var in []string
	for i, a := range args {
		if a == "--" {
			in = append(in, args[i:]...)
			break
		}
		// A negative number right after a flag that takes a value is
		// that flag's value.
		if negativeNumber.MatchString(a) && !(i > 0 && takesValue(cmd, args[i-1])) {
			a = mark + a
		}
		in = append(in, a)
	}
	// cobra's ParseFlags does nothing while DisableFlagParsing is set.
	cmd.DisableFlagParsing = false
	err := cmd.ParseFlags(in)
	cmd.DisableFlagParsing = true
	if err != nil {
		return nil, err
	}
	if h, _ := cmd.Flags().GetBool("help"); h {
		return nil, pflagHelp
	}
	out := cmd.Flags().Args()
	for i, a := range out {
		out[i] = strings.TrimPrefix(a, mark)
	}
	return out, nil
}

// pflagHelp reports that --help was given.
var pflagHelp = errors.New("help requested")

// takesValue reports whether arg is a flag, without "=", whose value is the
// next argument.
func takesValue(cmd *cobra.Command, arg string) bool {
	if !strings.HasPrefix(arg, "-") || strings.Contains(arg, "=") || arg == "-" {
		return false
	}
	name := strings.TrimLeft(arg, "-")
	f := cmd.Flags().Lookup(name)
	if f == nil && len(name) == 1 {
		f = cmd.Flags().ShorthandLookup(name)
	}
	if f == nil {
		f = cmd.InheritedFlags().Lookup(name)
	}
	return f != nil && f.NoOptDefVal == ""
}

// outputFormat is how a command prints its result.
type outputFormat struct {
	json, raw bool
}

func (o *outputFormat) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.json, "json", false, "print one JSON object per view, with the fields of the operation's kind")
	cmd.Flags().BoolVar(&o.raw, "raw", false, "print only the final result, unformatted (a value exactly as stored), for scripts")
}

func (o outputFormat) check() error {
	if o.json && o.raw {
		return errors.New("--json and --raw exclude each other")
	}
	return nil
}

// viewName is what a view is called in every output (invoke and bench
// alike): the preliminary view is the one at the weak (eventual) level,
// the final one the strong view, whichever of them an invocation asked for.
func viewName(l correctable.Level) string {
	if l == correctable.Strong {
		return "final"
	}
	return "preliminary"
}

// kindJSON is a result as --json prints it: only the fields the
// operation's kind has.
func kindJSON(op client.Op, r client.Result) map[string]any {
	m := map[string]any{"op": op.Kind().String()}
	if r.Err != nil {
		m["error"] = strings.TrimPrefix(r.Err.Error(), "client: ")
		return m
	}
	val := func(name string, v []byte) {
		if utf8.Valid(v) {
			m[name] = string(v)
		} else {
			m[name+"_base64"] = base64.StdEncoding.EncodeToString(v)
		}
	}
	switch op.Kind() {
	case client.KindGet:
		m["found"] = r.Found
		if r.Found {
			val("value", r.Value)
		}
	case client.KindPut, client.KindDelete:
		m["replaced"] = r.Found
		if r.Found {
			val("previous", r.Value)
		}
	case client.KindIncr:
		m["value"] = r.Int
	case client.KindAppend:
		m["length"] = r.Int
	case client.KindCAS:
		m["swapped"] = r.OK
		if !r.OK {
			m["found"] = r.Found
			if r.Found {
				val("current", r.Value)
			}
		}
	case client.KindScan:
		items := make([]map[string]any, 0, len(r.Items))
		for _, kv := range r.Items {
			it := map[string]any{"key": kv.Key}
			if utf8.Valid(kv.Value) {
				it["value"] = string(kv.Value)
			} else {
				it["value_base64"] = base64.StdEncoding.EncodeToString(kv.Value)
			}
			items = append(items, it)
		}
		m["items"] = items
	case client.KindEnqueue:
		m["seq"], m["length"] = r.Int, r.Len
	case client.KindDequeue:
		m["dequeued"] = r.OK
		if r.OK {
			m["seq"], m["remaining"] = r.Int, r.Len
			val("value", r.Value)
		}
	default:
		return resultJSON(r)
	}
	return m
}

// writeRaw prints a final result unformatted: a value exactly as stored
// (no newline added), a number on its own line, scan items as key and
// value lines (as etcdctl get --prefix prints them).
func writeRaw(w io.Writer, op client.Op, r client.Result) {
	switch op.Kind() {
	case client.KindGet:
		w.Write(r.Value)
	case client.KindDequeue:
		if r.OK {
			w.Write(r.Value)
		}
	case client.KindIncr, client.KindAppend, client.KindEnqueue:
		fmt.Fprintln(w, r.Int)
	case client.KindCAS:
		fmt.Fprintln(w, strconv.FormatBool(r.OK))
	case client.KindScan:
		for _, kv := range r.Items {
			fmt.Fprintf(w, "%s\n%s\n", kv.Key, kv.Value)
		}
	default:
		fmt.Fprintln(w, "OK")
	}
}

// opName is an operation as messages name it, its key cut short.
func opName(op client.Op) string { return shorten(op.String()) }

// statusPart is the part of a client error that carries the server's gRPC
// status: "(Code: message)" at its end.
var statusPart = regexp.MustCompile(`\((\w+): (.*)\)$`)

// endpointPart is where the client names the endpoint it tried.
var endpointPart = regexp.MustCompile(` at ([^ :]+:[0-9]+): `)

// invokeError turns the error of an invocation into one line that says
// where it came from: the client (before or without reaching a replica) or
// a server (which replica), with the cause once.
func invokeError(op client.Op, err error, timeout time.Duration) error {
	msg := err.Error()
	ep := ""
	if m := endpointPart.FindStringSubmatch(msg); m != nil {
		ep = m[1]
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("client: %s: no final answer within --command-timeout %v", opName(op), timeout)
	case errors.Is(err, client.ErrUnavailable):
		return fmt.Errorf("client: %s: no replica reachable: %s", opName(op), unreachable(msg))
	}
	if m := statusPart.FindStringSubmatch(msg); m != nil {
		where := "server"
		if ep != "" {
			where = "server: replica at " + ep
		}
		return fmt.Errorf("%s refused %s: %s (%s)", where, opName(op), serverCause(m[2]), m[1])
	}
	return fmt.Errorf("client: %s: %s", opName(op), lastCause(msg))
}

// lastCause is the innermost part of a chain of "prefix: cause" messages,
// without the client's labels, on one line.
func lastCause(msg string) string {
	msg = strings.ReplaceAll(msg, "client: ", "")
	if i := strings.LastIndex(msg, "): "); i >= 0 && !strings.HasSuffix(msg, ")") {
		msg = msg[i+3:]
	}
	return shorten(msg)
}

// resultError is the error of an operation the state machine refused (a
// key too large, incr of a non-number): a server's answer.
func resultError(op client.Op, replica uint64, err error) error {
	return fmt.Errorf("server: replica %d refused %s: %s", replica, opName(op), strings.TrimPrefix(err.Error(), "client: "))
}
