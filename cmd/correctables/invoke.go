package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/correctable"
)

const opUsage = `operations:
  get KEY                  put KEY VALUE            delete KEY
  incr KEY [DELTA]         append KEY VALUE         cas KEY EXPECTED NEW
  scan PREFIX [LIMIT]      enqueue QUEUE ITEM       dequeue QUEUE
A VALUE, ITEM, EXPECTED or NEW of - is read from stdin, @FILE from FILE
(@@... is a value that starts with @). Keys are not empty; a scan's PREFIX
may be ("" lists every key). Negative numbers are arguments: incr n -5.`

// opSpec is one operation of the command line: its argument count and how
// to build it from the arguments.
type opSpec struct {
	min, max int
	build    func(a []string, v *valueSource) (client.Op, error)
}

var opSpecs = map[string]opSpec{
	"get": {1, 1, func(a []string, _ *valueSource) (client.Op, error) { return client.Get(a[0]), nil }},
	"put": {2, 2, func(a []string, vs *valueSource) (client.Op, error) {
		v, err := vs.value(a[1])
		return client.Put(a[0], v), err
	}},
	"delete": {1, 1, func(a []string, _ *valueSource) (client.Op, error) { return client.Delete(a[0]), nil }},
	"incr": {1, 2, func(a []string, _ *valueSource) (client.Op, error) {
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
	"append": {2, 2, func(a []string, vs *valueSource) (client.Op, error) {
		v, err := vs.value(a[1])
		return client.Append(a[0], v), err
	}},
	"cas": {3, 3, func(a []string, vs *valueSource) (client.Op, error) {
		old, err := vs.value(a[1])
		if err != nil {
			return client.Op{}, err
		}
		v, err := vs.value(a[2])
		return client.CAS(a[0], old, v), err
	}},
	"scan": {1, 2, func(a []string, _ *valueSource) (client.Op, error) {
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
	"enqueue": {2, 2, func(a []string, vs *valueSource) (client.Op, error) {
		v, err := vs.value(a[1])
		return client.Enqueue(a[0], v), err
	}},
	"dequeue": {1, 1, func(a []string, _ *valueSource) (client.Op, error) { return client.Dequeue(a[0]), nil }},
}

// parseOp turns command-line words into an operation; values of - are read
// from stdin.
func parseOp(args []string, stdin io.Reader) (client.Op, error) {
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
		want := strconv.Itoa(spec.min)
		if spec.max != spec.min {
			want = fmt.Sprintf("%d or %d", spec.min, spec.max)
		}
		return client.Op{}, fmt.Errorf("%s takes %s arguments, got %d\n%s", name, want, len(a), opUsage)
	}
	if name != "scan" {
		if err := checkKey(name, a[0]); err != nil {
			return client.Op{}, err
		}
	}
	return spec.build(a, &valueSource{stdin: stdin})
}

func newInvokeCmd(cf *connFlags) *cobra.Command {
	var weak, strong, quorum, all, cpqQuorum, cpqAll bool
	var out outputFormat
	var cpqP, cpqWriteP float64
	var readDelay time.Duration
	var cpqSeed uint64
	var sf slaFlags
	cmd := &cobra.Command{
		Use:   "invoke OPERATION ARGS...",
		Short: "Run one operation and print every view: preliminary, then final",
		Long: `invoke runs one operation on the cluster and prints one line per view as it
arrives: the level, the time since the invocation, and the value, or
"confirmed" when the final view equals the preliminary one and came without a
payload. By default it asks for both views (Correctables' invoke); --weak asks
for the preliminary view only (invokeWeak), --strong for the final only
(invokeStrong). --cpq P draws one of the two levels, strong with
probability P (continuous partial quorums, CPQ §1; --cpq-write sets another
probability for updates, --read-delay an artificial delay before a weak read,
--seed the draw; --cpq-quorum makes the stronger level the quorum level, the
paper's QUORUM; --cpq-all makes an update's stronger level the all level,
as --all). --quorum runs the operation at the quorum level, no
consensus, one view at level quorum: a read returns the freshest of a
majority of the replicas' tentative states, an update is acknowledged once
a majority of the replicas has received it (docs/consistency.md says what
the level guarantees). --all is --quorum with every replica for the
majority (Cassandra's ALL): an update is acknowledged once every replica has
received it, so that a weak read of any replica that starts after it
includes it. --session FILE runs the
operation within a session kept in FILE and prints the guarantees each view satisfies for it; --sla
cart|password|web|FILE.json reads a key under a consistency-based SLA
(Pileus §3.3) and prints the subSLA each view met and its utility, the
view the Get settles on labelled final. Everywhere else a view is labelled
by its level: the weak view is the preliminary one and the strong view the
final one, also when it is the only view asked for.

` + opUsage,
		// Flags are parsed by parseKeepingNegatives: incr n -5.
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			args, err := parseKeepingNegatives(cmd, args)
			if err == pflagHelp {
				return cmd.Help()
			}
			if err != nil {
				return err
			}
			if len(args) == 0 {
				return fmt.Errorf("requires at least 1 arg(s), only received 0\n%s", opUsage)
			}
			if err := out.check(); err != nil {
				return err
			}
			op, err := parseOp(args, cmd.InOrStdin())
			if err != nil {
				return err
			}
			if weak && strong {
				return errors.New("--weak and --strong exclude each other; give neither for both views")
			}
			if quorum && (weak || strong) {
				return errors.New("--quorum asks for the quorum level's view only: give neither --weak nor --strong")
			}
			if all && (weak || strong || quorum) {
				return errors.New("--all asks for the all level's view only: give none of --weak, --strong and --quorum")
			}
			if err := sf.check(op, weak, strong, cmd.Flags().Changed("cpq") || cmd.Flags().Changed("cpq-write")); err != nil {
				return err
			}
			var cpq *client.CPQ
			if f := cmd.Flags(); f.Changed("cpq") || f.Changed("cpq-write") || f.Changed("read-delay") || cpqQuorum || cpqAll {
				if weak || strong || quorum || all {
					return errors.New("--cpq, --cpq-write, --cpq-quorum, --cpq-all and --read-delay choose the level: give none of --weak, --strong, --quorum and --all")
				}
				if cpqQuorum && cpqAll {
					return errors.New("--cpq-quorum and --cpq-all both choose an update's stronger level: give one")
				}
				if !f.Changed("cpq-write") {
					cpqWriteP = cpqP
				}
				if cpq, err = client.NewCPQ(client.CPQConfig{ReadP: cpqP, WriteP: cpqWriteP, ReadDelay: readDelay, Seed: cpqSeed, QuorumReads: cpqQuorum, QuorumWrites: cpqQuorum, AllWrites: cpqAll}); err != nil {
					return err
				}
			}
			if (quorum || all) && sf.active() {
				return errors.New("--session and --sla choose the views: drop --quorum and --all")
			}
			ctx, c, done, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			if sf.active() {
				return sf.run(ctx, cmd, c, op, weak, strong, out.json)
			}
			var cor *correctable.Correctable[client.Result]
			switch {
			case cpq != nil:
				cor = c.InvokeCPQ(ctx, op, cpq)
			case quorum:
				cor = c.InvokeQuorum(ctx, op)
			case all:
				cor = c.InvokeAll(ctx, op)
			case weak:
				cor = c.InvokeWeak(ctx, op)
			case strong:
				cor = c.InvokeStrong(ctx, op)
			default:
				cor = c.Invoke(ctx, op)
			}
			return printViews(cmd.OutOrStdout(), op, cor, out, cf.commandTimeout)
		},
	}
	cf.registerData(cmd)
	out.register(cmd)
	cmd.Flags().BoolVar(&weak, "weak", false, "preliminary view only")
	cmd.Flags().BoolVar(&strong, "strong", false, "final (strong) view only")
	cmd.Flags().Float64Var(&cpqP, "cpq", 0, "CPQ: run at the strong level with this probability, else at the weak level (one view)")
	cmd.Flags().Float64Var(&cpqWriteP, "cpq-write", 0, "CPQ: the strong level's probability for an update (default: --cpq)")
	cmd.Flags().DurationVar(&readDelay, "read-delay", 0, "CPQ: artificial delay before a weak read")
	cmd.Flags().Uint64Var(&cpqSeed, "seed", 1, "CPQ: seed of the draw")
	cmd.Flags().BoolVar(&cpqQuorum, "cpq-quorum", false, "CPQ: an operation drawn at the stronger level runs at the quorum level (as --quorum), not the strong one")
	cmd.Flags().BoolVar(&cpqAll, "cpq-all", false, "CPQ: an update drawn at the stronger level runs at the all level (as --all), not the strong one")
	cmd.Flags().BoolVar(&quorum, "quorum", false, "the quorum level (one view): a read of the freshest of a majority's tentative states, an update acknowledged once a majority has received it")
	cmd.Flags().BoolVar(&all, "all", false, "the all level (one view): --quorum with every replica for the majority; an update acknowledged once every replica has received it")
	sf.register(cmd)
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

// printViews prints the views of an invocation as they come (text or
// JSON, one line each), or only the last one's result (raw), and returns
// the invocation's error, or the state machine's refusal, as one line.
func printViews(w io.Writer, op client.Op, cor *correctable.Correctable[client.Result], format outputFormat, timeout time.Duration) error {
	var last client.Result
	var lastReplica uint64
	for v := range cor.AllViews() {
		var replica uint64
		if st, ok := v.Stamp.(client.Stamp); ok {
			replica = st.Replica
		}
		last, lastReplica = v.Value, replica
		if format.raw {
			continue
		}
		kind := viewName(v.Level)
		if format.json {
			b, _ := json.Marshal(struct {
				View string `json:"view"`
				viewJSON
			}{kind, viewJSON{
				Level: v.Level.String(), Final: v.Final, Confirmed: v.Confirmed,
				ElapsedMS: float64(v.Elapsed.Microseconds()) / 1000, Result: kindJSON(op, v.Value), Replica: replica,
			}})
			fmt.Fprintln(w, string(b))
			continue
		}
		val := formatResult(op, v.Value)
		if v.Confirmed {
			val = "confirmed"
		}
		fmt.Fprintf(w, "%-11s %-8s %9s  replica %d  %s\n", kind, v.Level, v.Elapsed.Round(10*time.Microsecond), replica, val)
	}
	if err := cor.Err(); err != nil {
		return invokeError(op, err, timeout)
	}
	// The operation ran but the state machine refused it (a bad argument,
	// incr on a non-number...): the views said so; the exit code does too.
	if last.Err != nil {
		return resultError(op, lastReplica, last.Err)
	}
	if format.raw {
		writeRaw(w, op, last)
	}
	return nil
}

func formatResult(op client.Op, r client.Result) string {
	if r.Err != nil {
		return "error: " + strings.TrimPrefix(r.Err.Error(), "client: ")
	}
	switch op.Kind() {
	case client.KindPut, client.KindDelete:
		// Writes return the value they replaced.
		if r.Found {
			return fmt.Sprintf("ok (replaced %s)", quote(string(r.Value)))
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
func newGetCmd(cf *connFlags) *cobra.Command {
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "get KEY",
		Short: "Read a key with a strong (linearizable) read",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkKey("get", args[0]); err != nil {
				return err
			}
			return runStrong(cmd, cf, client.Get(args[0]), out)
		},
	}
	cf.registerData(cmd)
	out.register(cmd)
	return cmd
}

func newPutCmd(cf *connFlags) *cobra.Command {
	var out outputFormat
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Write a key with a strong operation (VALUE - reads stdin, @FILE a file)",
		// Flags are parsed by parseKeepingNegatives: put n -5.
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			args, err := parseKeepingNegatives(cmd, args)
			if err == pflagHelp {
				return cmd.Help()
			}
			if err != nil {
				return err
			}
			if len(args) != 2 {
				return fmt.Errorf("accepts 2 arg(s), received %d: put KEY VALUE", len(args))
			}
			op, err := parseOp(append([]string{"put"}, args...), cmd.InOrStdin())
			if err != nil {
				return err
			}
			return runStrong(cmd, cf, op, out)
		},
	}
	cf.registerData(cmd)
	out.register(cmd)
	return cmd
}

func runStrong(cmd *cobra.Command, cf *connFlags, op client.Op, out outputFormat) error {
	if err := out.check(); err != nil {
		return err
	}
	ctx, c, done, err := cf.connect(cmd)
	if err != nil {
		return err
	}
	defer done()
	return printViews(cmd.OutOrStdout(), op, c.InvokeStrong(ctx, op), out, cf.commandTimeout)
}
