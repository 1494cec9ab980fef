package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/api"
)

// statusRow is one replica's line of `status`.
type statusRow struct {
	Endpoint     string `json:"endpoint"`
	ID           uint64 `json:"id,omitempty"`
	Role         string `json:"role,omitempty"`
	Leader       uint64 `json:"leader,omitempty"`
	Term         uint64 `json:"term,omitempty"`
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	CommitIndex  uint64 `json:"commit_index,omitempty"`
	Committed    uint64 `json:"committed_ops"`
	Tentative    uint64 `json:"tentative_ops"`
	Health       string `json:"health"`
}

// catchingUpLag is how far behind its commit index a replica's applied
// index is when status calls it catching up.
const catchingUpLag = 1000

func newStatusCmd(cf *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "One row per replica: id, role, term, applied index, committed and tentative operations, health",
		Long: `status asks every replica of --endpoints for its Status and prints one row
each: its id, its role (leader or follower, "no leader" while it knows of
none), its raft term, applied index, the operations committed and tentative
at it, and its health: ok, catching up (applied more than 1000 entries
behind the commit index it knows), or unreachable with the cause. It exits
non-zero if a replica is unreachable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			eps, err := cf.resolve()
			if err != nil {
				return err
			}
			ctx, cancel := cf.commandContext(cmd)
			defer cancel()
			rows := make([]statusRow, len(eps))
			var wg sync.WaitGroup
			for i, ep := range eps {
				wg.Go(func() { rows[i] = replicaStatus(ctx, cf, ep) })
			}
			wg.Wait()
			out := cmd.OutOrStdout()
			down := 0
			for _, r := range rows {
				if r.ID == 0 {
					down++
				}
			}
			if asJSON {
				for _, r := range rows {
					b, _ := json.Marshal(r)
					fmt.Fprintln(out, string(b))
				}
			} else {
				tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tENDPOINT\tROLE\tTERM\tAPPLIED\tCOMMITTED\tTENTATIVE\tHEALTH")
				for _, r := range rows {
					if r.ID == 0 {
						fmt.Fprintf(tw, "-\t%s\t-\t-\t-\t-\t-\t%s\n", r.Endpoint, r.Health)
						continue
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", r.ID, r.Endpoint, r.Role, r.Term, r.AppliedIndex, r.Committed, r.Tentative, r.Health)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if down > 0 {
				return fmt.Errorf("client: %d of %d replicas unreachable", down, len(rows))
			}
			return nil
		},
	}
	cf.registerData(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per replica")
	return cmd
}

// replicaStatus asks one replica for its Status.
func replicaStatus(ctx context.Context, cf *connFlags, ep string) statusRow {
	row := statusRow{Endpoint: ep}
	cc, err := cf.dialEndpoint(ep)
	if err != nil {
		row.Health = "unreachable: " + shorten(err.Error())
		return row
	}
	defer cc.Close()
	sctx, cancel := context.WithTimeout(ctx, cf.dialTimeout)
	defer cancel()
	st, err := api.NewStoreClient(cc).Status(sctx, &api.StatusRequest{})
	if err != nil {
		row.Health = "unreachable: " + rpcCause(err)
		return row
	}
	row.ID, row.Leader, row.Term = st.GetId(), st.GetLeader(), st.GetTerm()
	row.AppliedIndex, row.CommitIndex = st.GetAppliedIndex(), st.GetCommitIndex()
	row.Committed, row.Tentative = st.GetCommittedOps(), st.GetTentativeOps()
	switch {
	case st.GetLeader() == 0:
		row.Role = "no leader"
	case st.GetLeader() == st.GetId():
		row.Role = "leader"
	default:
		row.Role = "follower"
	}
	row.Health = "ok"
	if row.CommitIndex > row.AppliedIndex+catchingUpLag {
		row.Health = fmt.Sprintf("catching up (%d entries behind)", row.CommitIndex-row.AppliedIndex)
	}
	return row
}
