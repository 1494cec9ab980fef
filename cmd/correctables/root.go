package main

import "github.com/spf13/cobra"

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "correctables",
		Short: "Correctables: one operation, several views, each stronger than the last",
		Long: `Correctables is a replicated data store and Go client library in which one
operation returns several results over time: a fast preliminary view from the
nearest replica and a final, strongly consistent view after consensus.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDemoCmd(), newUpCmd(), newInvokeCmd(), newGetCmd(), newPutCmd(), newBenchCmd(), newServeCmd())
	return root
}
