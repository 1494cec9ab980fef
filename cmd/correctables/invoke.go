package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

// clientFlags are the flags every command that talks to a cluster shares.
type clientFlags struct {
	endpoints string
	data      string
	timeout   time.Duration
	json      bool
}

func (f *clientFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.endpoints, "endpoints", "", "comma-separated replica addresses (default: <data>/endpoints written by up, else 127.0.0.1:7101-7103)")
	fl.StringVar(&f.data, "data", "data", "data directory of a running `up`, to find its endpoints")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "give up after this long")
	fl.BoolVar(&f.json, "json", false, "print one JSON object per view, for scripts")
}

func (f *clientFlags) resolve() ([]string, error) {
	s := f.endpoints
	if s == "" {
		if b, err := os.ReadFile(filepath.Join(f.data, endpointsFile)); err == nil {
			s = strings.TrimSpace(string(b))
		} else {
			s = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
		}
	}
	var eps []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil, errors.New("--endpoints: no address given")
	}
	return eps, nil
}

func (f *clientFlags) dial(ctx context.Context) (*client.Client, error) {
	eps, err := f.resolve()
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(ctx, eps, client.WithDialTimeout(f.timeout))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s (is `correctables up` running?): %w", strings.Join(eps, ","), err)
	}
	return c, nil
}

const opUsage = `operations:
  get KEY                  put KEY VALUE            delete KEY
  incr KEY [DELTA]         append KEY VALUE         cas KEY EXPECTED NEW
  scan PREFIX [LIMIT]      enqueue QUEUE ITEM       dequeue QUEUE
(arguments that start with '-' go after '--':  invoke -- incr n -5)`

// opSpec is one operation of the command line: its argument count and how
// to build it from the arguments.
type opSpec struct {
	min, max int
	build    func(a []string) (client.Op, error)
}

var opSpecs = map[string]opSpec{
	"get":    {1, 1, func(a []string) (client.Op, error) { return client.Get(a[0]), nil }},
	"put":    {2, 2, func(a []string) (client.Op, error) { return client.Put(a[0], []byte(a[1])), nil }},
	"delete": {1, 1, func(a []string) (client.Op, error) { return client.Delete(a[0]), nil }},
	"incr": {1, 2, func(a []string) (client.Op, error) {
		d := int64(1)
		if len(a) == 2 {
			v, err := strconv.ParseInt(a[1], 10, 64)
			if err != nil {
				return client.Op{}, fmt.Errorf("incr: delta %q is not an integer", a[1])
			}
			d = v
		}
		return client.Incr(a[0], d), nil
	}},
	"append": {2, 2, func(a []string) (client.Op, error) { return client.Append(a[0], []byte(a[1])), nil }},
	"cas": {3, 3, func(a []string) (client.Op, error) {
		return client.CAS(a[0], []byte(a[1]), []byte(a[2])), nil
	}},
	"scan": {1, 2, func(a []string) (client.Op, error) {
		limit := 0
		if len(a) == 2 {
			v, err := strconv.Atoi(a[1])
			if err != nil || v < 0 {
				return client.Op{}, fmt.Errorf("scan: limit %q is not a non-negative integer", a[1])
			}
			limit = v
		}
		return client.Scan(a[0], limit), nil
	}},
	"enqueue": {2, 2, func(a []string) (client.Op, error) { return client.Enqueue(a[0], []byte(a[1])), nil }},
	"dequeue": {1, 1, func(a []string) (client.Op, error) { return client.Dequeue(a[0]), nil }},
}

// parseOp turns command-line words into an operation.
func parseOp(args []string) (client.Op, error) {
	if len(args) == 0 {
		return client.Op{}, fmt.Errorf("no operation given\n%s", opUsage)
	}
	name, a := strings.ToLower(args[0]), args[1:]
	if name == "del" {
		name = "delete"
	}
	spec, ok := opSpecs[name]
	if !ok {
		return client.Op{}, fmt.Errorf("unknown operation %q\n%s", args[0], opUsage)
	}
	if len(a) < spec.min || len(a) > spec.max {
		return client.Op{}, fmt.Errorf("%s takes %d to %d arguments, got %d\n%s", name, spec.min, spec.max, len(a), opUsage)
	}
	return spec.build(a)
}

func newInvokeCmd() *cobra.Command {
	var cf clientFlags
	var weak, strong bool
	cmd := &cobra.Command{
		Use:   "invoke OPERATION ARGS...",
		Short: "Run one operation and print every view: preliminary, then final",
		Long: `invoke runs one operation on the cluster and prints one line per view as it
arrives: the level, the time since the invocation, and the value, or
"confirmed" when the final view equals the preliminary one and came without a
payload. By default it asks for both views (Correctables' invoke); --weak asks
for the preliminary view only (invokeWeak), --strong for the final only
(invokeStrong).

` + opUsage,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			op, err := parseOp(args)
			if err != nil {
				return err
			}
			if weak && strong {
				return errors.New("--weak and --strong exclude each other; give neither for both views")
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
			defer cancel()
			c, err := cf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			var cor *correctable.Correctable[client.Result]
			switch {
			case weak:
				cor = c.InvokeWeak(ctx, op)
			case strong:
				cor = c.InvokeStrong(ctx, op)
			default:
				cor = c.Invoke(ctx, op)
			}
			return printViews(cmd.OutOrStdout(), op, cor, cf.json)
		},
	}
	cf.register(cmd)
	cmd.Flags().BoolVar(&weak, "weak", false, "preliminary view only")
	cmd.Flags().BoolVar(&strong, "strong", false, "final (strong) view only")
	return cmd
}

// viewJSON is one view as --json prints it.
type viewJSON struct {
	Level     string   `json:"level"`
	Final     bool     `json:"final"`
	Confirmed bool     `json:"confirmed"`
	ElapsedMS float64  `json:"elapsed_ms"`
	Result    any      `json:"result"`
	Replica   uint64   `json:"replica,omitempty"`
	Error     string   `json:"error,omitempty"`
	Items     []string `json:"-"`
}

func printViews(w io.Writer, op client.Op, cor *correctable.Correctable[client.Result], asJSON bool) error {
	for v := range cor.Views() {
		var replica uint64
		if st, ok := v.Stamp.(client.Stamp); ok {
			replica = st.Replica
		}
		if asJSON {
			b, _ := json.Marshal(viewJSON{
				Level: v.Level.String(), Final: v.Final, Confirmed: v.Confirmed,
				ElapsedMS: float64(v.Elapsed.Microseconds()) / 1000, Result: resultJSON(v.Value), Replica: replica,
			})
			fmt.Fprintln(w, string(b))
			continue
		}
		kind := "preliminary"
		if v.Final {
			kind = "final"
		}
		val := formatResult(op, v.Value)
		if v.Confirmed {
			val = "confirmed"
		}
		fmt.Fprintf(w, "%-11s %-8s %9s  replica %d  %s\n", kind, v.Level, v.Elapsed.Round(10*time.Microsecond), replica, val)
	}
	if err := cor.Err(); err != nil {
		return err
	}
	// The operation ran but the state machine refused it (a bad argument,
	// incr on a non-number...): the views said so; the exit code does too.
	if v, ok := cor.Latest(); ok && v.Value.Err != nil {
		return fmt.Errorf("%s: %w", op, v.Value.Err)
	}
	return nil
}

func formatResult(op client.Op, r client.Result) string {
	if r.Err != nil {
		return "error: " + r.Err.Error()
	}
	switch op.Kind() {
	case client.KindPut, client.KindDelete:
		// Writes return the value they replaced.
		if r.Found {
			return fmt.Sprintf("ok (replaced %q)", r.Value)
		}
		if op.Kind() == client.KindDelete {
			return "ok (no such key)"
		}
		return "ok (new key)"
	case client.KindIncr:
		return fmt.Sprintf("%d", r.Int)
	case client.KindCAS:
		if r.OK {
			return "swapped"
		}
		if r.Found {
			return fmt.Sprintf("not swapped (value is %q)", r.Value)
		}
		return "not swapped (no such key)"
	case client.KindEnqueue:
		return fmt.Sprintf("enqueued as #%d (queue length %d)", r.Int, r.Len)
	case client.KindDequeue:
		if !r.OK {
			return "queue empty"
		}
		return fmt.Sprintf("dequeued #%d %q (%d left)", r.Int, r.Value, r.Len)
	case client.KindAppend:
		return fmt.Sprintf("ok (length %d)", r.Int)
	}
	var parts []string
	if r.Found {
		parts = append(parts, fmt.Sprintf("value=%q", r.Value))
	} else if r.Value == nil && len(r.Items) == 0 {
		parts = append(parts, "not found")
	}
	if r.Int != 0 {
		parts = append(parts, fmt.Sprintf("int=%d", r.Int))
	}
	if r.Len != 0 {
		parts = append(parts, fmt.Sprintf("len=%d", r.Len))
	}
	if r.OK {
		parts = append(parts, "ok")
	}
	if !r.Found && r.Value != nil {
		parts = append(parts, fmt.Sprintf("value=%q", r.Value))
	}
	for _, kv := range r.Items {
		parts = append(parts, fmt.Sprintf("%s=%q", kv.Key, kv.Value))
	}
	return strings.Join(parts, " ")
}

func resultJSON(r client.Result) map[string]any {
	m := map[string]any{"found": r.Found, "value": string(r.Value), "int": r.Int, "len": r.Len, "ok": r.OK}
	if r.Err != nil {
		m["error"] = r.Err.Error()
	}
	if len(r.Items) > 0 {
		items := map[string]string{}
		for _, kv := range r.Items {
			items[kv.Key] = string(kv.Value)
		}
		m["items"] = items
	}
	return m
}

// newGetCmd and newPutCmd are the short forms: one strong operation, the
// final view only.
func newGetCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Read a key with a strong (linearizable) read",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStrong(cmd, &cf, client.Get(args[0]))
		},
	}
	cf.register(cmd)
	return cmd
}

func newPutCmd() *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Write a key with a strong operation",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runStrong(cmd, &cf, client.Put(args[0], []byte(args[1])))
		},
	}
	cf.register(cmd)
	return cmd
}

func runStrong(cmd *cobra.Command, cf *clientFlags, op client.Op) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
	defer cancel()
	c, err := cf.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return printViews(cmd.OutOrStdout(), op, c.InvokeStrong(ctx, op), cf.json)
}
