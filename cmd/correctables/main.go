// Command correctables is the one binary of the project: it starts clusters,
// serves replicas, invokes operations, runs the demo and the benchmarks.
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "correctables:", err)
		os.Exit(2)
	}
}
