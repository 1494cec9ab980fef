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
		Version:       versionString(),
	}
	// Connection flags (conn.go) are global, as etcdctl's are.
	cf := &connFlags{}
	cf.registerPersistent(root)
	root.AddCommand(newDemoCmd(), newUpCmd(), newInvokeCmd(cf), newGetCmd(cf), newPutCmd(cf), newBenchCmd(), newServeCmd(), newSnapshotCmd(cf),
		newVersionCmd(), newStatusCmd(cf), newScanCmd(cf))
	root.AddCommand(newCertCmd())
	root.AddCommand(newCheckCmd())
	root.AddCommand(newMemberCmd(cf))
	return root
}
