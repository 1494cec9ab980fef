package main

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/internal/gamma"
)

func newCheckCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check recorded traces",
	}
	cmd.AddCommand(newCheckGammaCmd())
	return cmd
}

func newCheckGammaCmd() *cobra.Command {
	var threshold time.Duration
	var top int
	cmd := &cobra.Command{
		Use:   "gamma TRACE",
		Short: "Γ staleness scores of a trace (Golab et al.; CPQ §2)",
		Long: `gamma reads a trace file (written by 'bench cpq --trace' or 'bench load
--trace') and prints its per-value Γ scores: for each value written, how much
the operations that wrote and read it must be widened in time to be
linearizable. Γ = 0 means the trace is linearizable; the proportion of
positive scores (over --threshold) estimates the fraction of stale reads
(Continuous Partial Quorums §2).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if threshold < 0 {
				return fmt.Errorf("--threshold %v: want 0 or more", threshold)
			}
			if top < 0 || top > 1_000_000 {
				return fmt.Errorf("--top %d: want 0 to 1,000,000", top)
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			ops, err := gamma.ReadTrace(f)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			rep, err := gamma.Score(ops, gamma.Options{Threshold: threshold, Scores: top > 0})
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			printGamma(cmd.OutOrStdout(), rep, threshold, top)
			return nil
		},
	}
	cmd.Flags().DurationVar(&threshold, "threshold", 0, "scores at or under this do not count as positive (clock error)")
	cmd.Flags().IntVar(&top, "top", 10, "print the values with the highest scores, up to this many")
	return cmd
}

func printGamma(w io.Writer, rep gamma.Report, threshold time.Duration, top int) {
	fmt.Fprintf(w, "operations   %d reads, %d writes (%d reads of values the trace never wrote, left out)\n", rep.Reads, rep.Writes, rep.Unmatched)
	fmt.Fprintf(w, "values       %d\n", rep.Values)
	fmt.Fprintf(w, "positive Γ   %d (%.4f of the values; threshold %v)\n", rep.Positive, rep.Proportion(), threshold)
	fmt.Fprintf(w, "Γ            %v", rep.Gamma)
	if rep.Gamma == 0 {
		fmt.Fprint(w, " (linearizable)")
	}
	fmt.Fprintln(w)
	scores := slices.Clone(rep.Scores)
	slices.SortStableFunc(scores, func(a, b gamma.ValueScore) int { return cmp.Compare(b.Score, a.Score) })
	printed := false
	for _, s := range scores[:min(top, len(scores))] {
		if s.Score == 0 {
			break
		}
		if !printed {
			fmt.Fprintln(w, "highest scores:")
			printed = true
		}
		fmt.Fprintf(w, "  %-10v %q value %016x (%d reads)\n", s.Score, s.Key, s.Value, s.Reads)
	}
}
