package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/correctables/correctables/client"
	"github.com/correctables/correctables/internal/loopback"
)

// connFlags are the connection flags of every command that talks to a
// running cluster (invoke, get, put, scan, status, snapshot save, ...). They
// are persistent flags of the root command, so they are accepted before or
// after the subcommand, as etcdctl's global flags are:
//
//	--endpoints        comma-separated replica addresses
//	--dial-timeout     bound on connecting
//	--command-timeout  bound on the whole command once connected
//
// The transport security flags (CA, certificate, key, --insecure) are added
// by connSecurityHook, set in conn_tls.go: that file registers its flags on
// the same flag set and says how to secure a connection.
type connFlags struct {
	endpoints      string
	dialTimeout    time.Duration
	commandTimeout time.Duration
	// data is a local flag of the client commands: the data directory of a
	// running `up`, whose endpoints file names the cluster when
	// --endpoints is not given.
	data string
	// security returns how to secure connections; nil means plaintext
	// (refused off loopback).
	security func() (connSecurity, error)
}

// connSecurity is how a client secures its connections. A nil creds means
// plaintext, which is refused for an endpoint off loopback unless insecure.
type connSecurity struct {
	creds    credentials.TransportCredentials
	insecure bool
}

// connSecurityHook, when set (conn_tls.go), registers the transport security
// flags on fs and returns the function that reads them once parsed.
var connSecurityHook func(fs *pflag.FlagSet) func() (connSecurity, error)

const (
	defaultDialTimeout    = 5 * time.Second
	defaultCommandTimeout = 10 * time.Second
	defaultEndpoints      = "127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"
)

// registerPersistent adds the connection flags to the root command.
func (f *connFlags) registerPersistent(root *cobra.Command) {
	fs := root.PersistentFlags()
	fs.StringVar(&f.endpoints, "endpoints", "", "comma-separated replica addresses (default: the endpoints file of --data, else "+defaultEndpoints+")")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", defaultDialTimeout, "give up connecting after this long")
	fs.DurationVar(&f.commandTimeout, "command-timeout", defaultCommandTimeout, "give up on the command after this long")
	// --timeout was the name before --command-timeout.
	fs.DurationVar(&f.commandTimeout, "timeout", defaultCommandTimeout, "")
	_ = fs.MarkDeprecated("timeout", "use --command-timeout")
	if connSecurityHook != nil {
		f.security = connSecurityHook(fs)
	}
}

// registerData adds --data, where a client command finds the endpoints of a
// cluster started with `up --data DIR`.
func (f *connFlags) registerData(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.data, "data", "data", "without --endpoints, find the cluster in the endpoints file that up writes in `DIR`")
}

// resolve returns the endpoints: --endpoints, else the endpoints file of
// --data, else the default loopback cluster.
func (f *connFlags) resolve() ([]string, error) {
	s := f.endpoints
	if s == "" {
		if b, err := os.ReadFile(filepath.Join(f.data, endpointsFile)); f.data != "" && err == nil {
			s = strings.TrimSpace(string(b))
		} else {
			s = defaultEndpoints
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

func (f *connFlags) validate() error {
	if f.dialTimeout <= 0 {
		return fmt.Errorf("--dial-timeout %v: want a positive duration", f.dialTimeout)
	}
	if f.commandTimeout <= 0 {
		return fmt.Errorf("--command-timeout %v: want a positive duration", f.commandTimeout)
	}
	return nil
}

func (f *connFlags) sec() (connSecurity, error) {
	if f.security == nil {
		return connSecurity{}, nil
	}
	return f.security()
}

// commandContext bounds a command by --command-timeout.
func (f *connFlags) commandContext(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithTimeout(ctx, f.commandTimeout)
}

// connect dials the Client (dial) within the command's context
// (commandContext), and returns both; done closes the client and ends the
// context.
func (f *connFlags) connect(cmd *cobra.Command) (ctx context.Context, c *client.Client, done func(), err error) {
	ctx, cancel := f.commandContext(cmd)
	c, err = f.dial(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return ctx, c, func() { c.Close(); cancel() }, nil
}

// dial builds the Client every client command uses, from the flags.
func (f *connFlags) dial(ctx context.Context) (*client.Client, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	eps, err := f.resolve()
	if err != nil {
		return nil, err
	}
	sec, err := f.sec()
	if err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithDialTimeout(f.dialTimeout)}
	if sec.creds != nil {
		opts = append(opts, client.WithTransportCredentials(sec.creds))
	}
	if sec.insecure {
		opts = append(opts, client.WithInsecure())
	}
	if sec.creds == nil && !sec.insecure {
		for _, ep := range eps {
			if !loopback.Is(ep) {
				return nil, fmt.Errorf("client: endpoint %q is not on loopback: plaintext refused (give TLS flags, or --insecure)", ep)
			}
		}
	}
	// The dial gives up at --dial-timeout or at the command's deadline,
	// whichever comes first; an error names the one that did.
	bound, flag := f.dialTimeout, "--dial-timeout"
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < bound {
		bound, flag = min(f.commandTimeout, bound), "--command-timeout"
	}
	c, err := client.Dial(ctx, eps, opts...)
	if err != nil {
		return nil, dialError(eps, bound, flag, err)
	}
	return c, nil
}

// dialEndpoint opens a gRPC connection to one replica, secured as dial
// secures the Client's, for the commands that address replicas one by one
// (status, snapshot save). The connection is made lazily; the first RPC
// fails if the replica cannot be reached within its context.
func (f *connFlags) dialEndpoint(ep string) (*grpc.ClientConn, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	sec, err := f.sec()
	if err != nil {
		return nil, err
	}
	creds := sec.creds
	if creds == nil {
		if !sec.insecure && !loopback.Is(ep) {
			return nil, fmt.Errorf("client: endpoint %q is not on loopback: plaintext refused (give TLS flags, or --insecure)", ep)
		}
		creds = insecure.NewCredentials()
	}
	cc, err := grpc.NewClient(ep, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("client: endpoint %s: %w", ep, err)
	}
	return cc, nil
}
