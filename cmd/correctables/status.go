package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

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
	// ClusterID is the id of the replica's cluster, from the reply's
	// header (empty from a replica that sends none).
	ClusterID string `json:"cluster_id,omitempty"`
	Health    string `json:"health"`
}

// catchingUpLag is how far behind its commit index a replica's applied
// index is when status calls it catching up.
const catchingUpLag = 1000

func newStatusCmd(cf *connFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "One row per replica: id, cluster id, role, term, applied index, committed and tentative operations, health",
		Long: `status asks every replica of --endpoints for its Status and prints one row
each: its id, the id of its cluster, its role (leader or follower, "no
leader" while it knows of none), its raft term, applied index, the
operations committed and tentative at it, and its health: ok, catching up (applied more than 1000 entries
behind the commit index it knows), or unreachable with the cause. It exits
non-zero if a replica is unreachable, or if the replicas belong to different
clusters (another cluster's replica uses the address of one of them).`,
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
				fmt.Fprintln(tw, "ID\tENDPOINT\tCLUSTER\tROLE\tTERM\tAPPLIED\tCOMMITTED\tTENTATIVE\tHEALTH")
				for _, r := range rows {
					if r.ID == 0 {
						fmt.Fprintf(tw, "-\t%s\t-\t-\t-\t-\t-\t-\t%s\n", r.Endpoint, r.Health)
						continue
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", r.ID, r.Endpoint, cmp.Or(r.ClusterID, "-"), r.Role, r.Term, r.AppliedIndex, r.Committed, r.Tentative, r.Health)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			}
			if down > 0 {
				return fmt.Errorf("client: %d of %d replicas unreachable", down, len(rows))
			}
			return mixedClusters(rows)
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
	var hdr metadata.MD
	st, err := api.NewStoreClient(cc).Status(sctx, &api.StatusRequest{}, grpc.Header(&hdr))
	if err != nil {
		row.Health = "unreachable: " + rpcCause(err)
		return row
	}
	row.ID, row.Leader, row.Term = st.GetId(), st.GetLeader(), st.GetTerm()
	if id, err := api.ClusterIDFromMetadata(hdr.Get(api.ClusterIDMetadata)); err == nil && id != 0 {
		row.ClusterID = api.FormatClusterID(id)
	}
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

// mixedClusters fails when the replicas that answered belong to different
// clusters: an endpoint's address is used by another cluster's replica.
func mixedClusters(rows []statusRow) error {
	byID := map[string][]string{}
	var ids []string
	for _, r := range rows {
		if r.ClusterID == "" {
			continue
		}
		if byID[r.ClusterID] == nil {
			ids = append(ids, r.ClusterID)
		}
		byID[r.ClusterID] = append(byID[r.ClusterID], r.Endpoint)
	}
	if len(ids) < 2 {
		return nil
	}
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("cluster %s at %s", id, strings.Join(byID[id], ", ")))
	}
	return fmt.Errorf("client: the endpoints belong to different clusters (another cluster's replica uses an address of this one): %s", strings.Join(parts, "; "))
}
