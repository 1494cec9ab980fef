package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/correctables/correctables/api"
)

func newMemberCmd(cf *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "List, add, promote and remove the replicas of a running cluster",
		Long: `member changes the set of replicas through raft configuration changes, so
every replica agrees on the members at every point of the log. A change of
one voter is applied as it is; raft goes through joint consensus when more
than one voter changes. Each command asks the first replica of --endpoints
that answers and returns once that replica has applied the change.

replace removes one voter and adds another in a single change, through
joint consensus; the new replica is then started with serve --join.

Replacing a dead host (see README.md):
  correctables member remove 3
  correctables member add --peer-addr host4:7101 --learner      # prints the new id, 4
  correctables serve --join --id 4 --data /new/empty/dir --peers 1=host1:7101,2=host2:7101,4=host4:7101
  correctables member promote 4                                 # once it has caught up`,
	}
	cmd.AddCommand(newMemberListCmd(cf), newMemberAddCmd(cf), newMemberPromoteCmd(cf), newMemberRemoveCmd(cf), newMemberReplaceCmd(cf))
	return cmd
}

func newMemberListCmd(cf *connFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the members as a replica has applied them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := memberCall(cmd, cf, func(ctx context.Context, c api.ClusterClient) (*api.MemberListReply, error) {
				return c.MemberList(ctx, &api.MemberListRequest{})
			})
			if err != nil {
				return err
			}
			printMembers(cmd.OutOrStdout(), l)
			return nil
		},
	}
	cf.registerData(cmd)
	return cmd
}

func newMemberAddCmd(cf *connFlags) *cobra.Command {
	var (
		id      uint64
		addr    string
		learner bool
	)
	cmd := &cobra.Command{
		Use:   "add --peer-addr HOST:PORT [--id N] [--learner]",
		Short: "Add a replica; then start it with serve --join and an empty data directory",
		Long: `add adds a replica to the configuration. --peer-addr is where the other
replicas reach it; --id defaults to one above every id the cluster has used
(a removed id is never used again). A --learner receives the log but does
not vote until promoted (member promote): add new replicas as learners so
that a replica still catching up never counts in a quorum. Then start the
new replica with serve --join, its --id, an empty --data and --peers naming
it and replicas of the cluster; it catches up from the leader's log or
snapshot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if addr == "" {
				return fmt.Errorf("member add: --peer-addr HOST:PORT is required (where the other replicas reach the new one)")
			}
			l, err := memberCall(cmd, cf, func(ctx context.Context, c api.ClusterClient) (*api.MemberListReply, error) {
				return c.MemberAdd(ctx, &api.MemberAddRequest{Id: id, PeerAddr: addr, Learner: learner})
			})
			if err != nil {
				return err
			}
			role := "voter"
			if learner {
				role = "learner"
			}
			printAdded(cmd.OutOrStdout(), l, id, addr, func(added uint64) string {
				return fmt.Sprintf("added replica %d (%s) at %s", added, role, addr)
			})
			return nil
		},
	}
	registerNewMemberFlags(cmd, &id, &addr)
	cmd.Flags().BoolVar(&learner, "learner", false, "add as a learner (no vote until member promote)")
	cf.registerData(cmd)
	return cmd
}

// registerNewMemberFlags registers the flags that place a new replica:
// --id and --peer-addr.
func registerNewMemberFlags(cmd *cobra.Command, id *uint64, addr *string) {
	f := cmd.Flags()
	f.Uint64Var(id, "id", 0, "the new replica's id (default: one above every id used)")
	f.StringVar(addr, "peer-addr", "", "HOST:PORT where the other replicas reach the new one (required)")
}

// printAdded prints what a change that added a replica at addr did:
// headline of the new replica's id (id, or when 0 the one the cluster
// chose: the highest at addr in l), the members after, and how to start
// the new replica.
func printAdded(w io.Writer, l *api.MemberListReply, id uint64, addr string, headline func(added uint64) string) {
	added := id
	if added == 0 {
		for _, m := range l.GetMembers() {
			if m.GetPeerAddr() == addr {
				added = max(added, m.GetId())
			}
		}
	}
	fmt.Fprintln(w, headline(added))
	printMembers(w, l)
	fmt.Fprintf(w, "start it with: correctables serve --join --id %d --data EMPTY_DIR --peers %d=%s,%s\n",
		added, added, addr, peersFlag(l, added))
}

// peersFlag lists the members other than id with their addresses, as
// serve's --peers takes them.
func peersFlag(l *api.MemberListReply, id uint64) string {
	var parts []string
	for _, m := range l.GetMembers() {
		if m.GetId() != id && m.GetPeerAddr() != "" {
			parts = append(parts, fmt.Sprintf("%d=%s", m.GetId(), m.GetPeerAddr()))
		}
	}
	return strings.Join(parts, ",")
}

func newMemberPromoteCmd(cf *connFlags) *cobra.Command {
	return newMemberIDCmd(cf, "promote ID", "Make a learner a voter", "promoted replica %d to voter",
		func(ctx context.Context, c api.ClusterClient, id uint64) (*api.MemberListReply, error) {
			return c.MemberPromote(ctx, &api.MemberPromoteRequest{Id: id})
		})
}

func newMemberRemoveCmd(cf *connFlags) *cobra.Command {
	var drain time.Duration
	cmd := newMemberIDCmd(cf, "remove ID", "Remove a replica for good (it drains, then stops; its id is never used again)", "removed replica %d",
		func(ctx context.Context, c api.ClusterClient, id uint64) (*api.MemberListReply, error) {
			return c.MemberRemove(ctx, &api.MemberRemoveRequest{Id: id, DrainTimeoutMs: uint32(drain.Milliseconds())})
		})
	cmd.Long = `remove first drains the replica: it refuses new client operations (clients
go to another replica) and commits every operation it acknowledged; then the
configuration change removes it, and it stops. A replica that does not
confirm its drain within --drain-timeout (it is down, or cut off) is removed
all the same, with a warning: weak writes it acknowledged and had not yet
gossiped may be lost.`
	registerDrainFlag(cmd, cf, &drain)
	return cmd
}

// maxDrainTimeout bounds --drain-timeout (the request carries milliseconds
// in 32 bits).
const maxDrainTimeout = time.Hour

// registerDrainFlag adds --drain-timeout to a command that removes a
// replica; the command's own bound (--command-timeout) is extended by it,
// since the command waits for the drain, then for the change.
func registerDrainFlag(cmd *cobra.Command, cf *connFlags, d *time.Duration) {
	cmd.Flags().DurationVar(d, "drain-timeout", 10*time.Second,
		"how long to wait for the removed replica to confirm its drain before removing it without (its un-gossiped weak writes may then be lost)")
	run := cmd.RunE
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *d < time.Millisecond || *d > maxDrainTimeout {
			return fmt.Errorf("--drain-timeout %v: want 1ms to %v", *d, maxDrainTimeout)
		}
		cf.commandTimeout += *d
		return run(cmd, args)
	}
}

// printWarning prints the warning of a change's reply, if any.
func printWarning(w io.Writer, l *api.MemberListReply) {
	if l.GetWarning() != "" {
		fmt.Fprintf(w, "warning: %s\n", l.GetWarning())
	}
}

// newMemberIDCmd is a member command on one replica, named by the id its
// one argument gives: it makes the change call makes, prints done (a
// format of the id) and the members after.
func newMemberIDCmd(cf *connFlags, use, short, done string, call func(context.Context, api.ClusterClient, uint64) (*api.MemberListReply, error)) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseMemberID(args[0])
			if err != nil {
				return err
			}
			l, err := memberCall(cmd, cf, func(ctx context.Context, c api.ClusterClient) (*api.MemberListReply, error) {
				return call(ctx, c, id)
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), done+"\n", id)
			printWarning(cmd.OutOrStdout(), l)
			printMembers(cmd.OutOrStdout(), l)
			return nil
		},
	}
	cf.registerData(cmd)
	return cmd
}

func newMemberReplaceCmd(cf *connFlags) *cobra.Command {
	var (
		id    uint64
		addr  string
		drain time.Duration
	)
	cmd := &cobra.Command{
		Use:   "replace OLD --peer-addr HOST:PORT [--id N]",
		Short: "Replace voter OLD by a new voter in one change (joint consensus)",
		Long: `replace removes voter OLD and adds a new voter in one configuration change:
raft goes through the joint configuration (a quorum of the old voters and
one of the new) and leaves it by itself, so the cluster never has fewer
voters. Then start the new replica with serve --join and an empty data
directory. Until it has caught up, the quorum needs every other voter.
OLD drains first, as with member remove (--drain-timeout).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			old, err := parseMemberID(args[0])
			if err != nil {
				return err
			}
			if addr == "" {
				return fmt.Errorf("member replace: --peer-addr HOST:PORT is required (where the other replicas reach the new one)")
			}
			l, err := memberCall(cmd, cf, func(ctx context.Context, c api.ClusterClient) (*api.MemberListReply, error) {
				return c.MemberReplace(ctx, &api.MemberReplaceRequest{Remove: old, Id: id, PeerAddr: addr, DrainTimeoutMs: uint32(drain.Milliseconds())})
			})
			if err != nil {
				return err
			}
			printWarning(cmd.OutOrStdout(), l)
			printAdded(cmd.OutOrStdout(), l, id, addr, func(added uint64) string {
				return fmt.Sprintf("replaced replica %d by replica %d (voter) at %s", old, added, addr)
			})
			return nil
		},
	}
	registerNewMemberFlags(cmd, &id, &addr)
	registerDrainFlag(cmd, cf, &drain)
	cf.registerData(cmd)
	return cmd
}

func parseMemberID(s string) (uint64, error) {
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("member: replica id %q is not a positive integer", s)
	}
	return id, nil
}

// memberCall runs call against the first endpoint that answers. A refusal
// (invalid change) is final; an unreachable replica passes to the next.
func memberCall(cmd *cobra.Command, cf *connFlags, call func(context.Context, api.ClusterClient) (*api.MemberListReply, error)) (*api.MemberListReply, error) {
	eps, err := cf.resolve()
	if err != nil {
		return nil, err
	}
	ctx, cancel := cf.commandContext(cmd)
	defer cancel()
	var errs []string
	for _, ep := range eps {
		cc, err := cf.dialEndpoint(ep)
		if err != nil {
			return nil, err
		}
		l, err := call(ctx, api.NewClusterClient(cc))
		cc.Close()
		if err == nil {
			return l, nil
		}
		if c := status.Code(err); c == codes.InvalidArgument || c == codes.FailedPrecondition {
			return nil, fmt.Errorf("server (%s): %s", ep, rpcCause(err))
		}
		errs = append(errs, fmt.Sprintf("%s: %s", ep, rpcCause(err)))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("member: no replica answered: %s", strings.Join(errs, "; "))
}

func printMembers(w io.Writer, l *api.MemberListReply) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tROLE\tPEER ADDRESS")
	for _, m := range l.GetMembers() {
		role := "voter"
		if m.GetLearner() {
			role = "learner"
		}
		if m.GetId() == l.GetLeader() {
			role += " (leader)"
		}
		if m.GetDraining() {
			role += " (draining)"
		}
		addr := m.GetPeerAddr()
		if addr == "" {
			addr = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\n", m.GetId(), role, addr)
	}
	tw.Flush()
	var notes []string
	if len(l.GetRemoved()) > 0 {
		var ids []string
		for _, id := range l.GetRemoved() {
			ids = append(ids, strconv.FormatUint(id, 10))
		}
		notes = append(notes, "removed (never reused): "+strings.Join(ids, ", "))
	}
	if l.GetJoint() {
		notes = append(notes, "joint configuration: a change of several voters is in progress")
	}
	notes = append(notes, fmt.Sprintf("as applied by replica %d at index %d", l.GetId(), l.GetAppliedIndex()))
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
}
