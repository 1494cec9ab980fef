package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/client"
)

func newScanCmd(cf *connFlags) *cobra.Command {
	var (
		limit    int
		keysOnly bool
		weak     bool
		out      outputFormat
	)
	cmd := &cobra.Command{
		Use:   "scan [PREFIX]",
		Short: "List the keys that start with PREFIX (all keys without one), in key order",
		Long: `scan lists the keys starting with PREFIX in key order, one per line with its
value (quoted), or only the keys (--keys-only). It reads strongly (the final
view) unless --weak; one scan returns at most --limit items (at most 1000,
the store's limit), and says so on stderr when it may have stopped short.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 || limit > 1000 {
				return fmt.Errorf("--limit %d: want 0 (the store's maximum, 1000) to 1000", limit)
			}
			if err := out.check(); err != nil {
				return err
			}
			if keysOnly && (out.json || out.raw) {
				return errors.New("--keys-only excludes --json and --raw")
			}
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			op := client.Scan(prefix, limit)
			ctx, c, done, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			defer done()
			cor := c.InvokeStrong(ctx, op)
			if weak {
				cor = c.InvokeWeak(ctx, op)
			}
			if out.json || out.raw {
				return printViews(cmd.OutOrStdout(), op, cor, out, cf.commandTimeout)
			}
			v, err := cor.Final(ctx)
			if err != nil {
				return invokeError(op, err, cf.commandTimeout)
			}
			if v.Value.Err != nil {
				var replica uint64
				if st, ok := v.Stamp.(client.Stamp); ok {
					replica = st.Replica
				}
				return resultError(op, replica, v.Value.Err)
			}
			w := cmd.OutOrStdout()
			for _, kv := range v.Value.Items {
				if keysOnly {
					fmt.Fprintln(w, kv.Key)
				} else {
					fmt.Fprintf(w, "%s\t%q\n", kv.Key, kv.Value)
				}
			}
			max := limit
			if max == 0 {
				max = 1000
			}
			if len(v.Value.Items) == max {
				fmt.Fprintf(cmd.ErrOrStderr(), "(%d items: there may be more; scan a longer prefix)\n", max)
			}
			return nil
		},
	}
	cf.registerData(cmd)
	f := cmd.Flags()
	f.IntVar(&limit, "limit", 0, "at most this many items (0: the store's maximum, 1000)")
	f.BoolVar(&keysOnly, "keys-only", false, "print only the keys")
	f.BoolVar(&weak, "weak", false, "read the preliminary view (any replica's state) instead of the final one")
	out.register(cmd)
	return cmd
}
