package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/correctables/correctables/internal/certs"
)

func newCertCmd() *cobra.Command {
	var (
		dir, caKey string
		lifetime   time.Duration
		overwrite  bool
	)
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Create a CA and replica and client certificates for a test cluster",
		Long: `cert creates the certificates of a cluster in --certs-dir, as CockroachDB's
cert commands do:

  correctables cert create-ca      --certs-dir certs
  correctables cert create-replica --certs-dir certs --id 1 host1 10.0.0.1
  correctables cert create-client  --certs-dir certs root

A replica's certificate names its id (URI urn:correctables:replica:<id>):
peers check that the certificate of a replica names the id it speaks for.
The host names and addresses given are those clients dial. Files:
ca.crt and ca.key, replica.<id>.crt/.key, client.<name>.crt/.key (keys
mode 0600). Keep ca.key off the replicas in production (--ca-key reads it
from elsewhere). Existing files are never replaced without --overwrite.

Then: serve --certs-dir certs ..., and clients
  correctables --cacert certs/ca.crt --cert certs/client.root.crt --key certs/client.root.key ...`,
		Args: cobra.NoArgs,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&dir, "certs-dir", "certs", "directory the certificates are written to (and ca.crt read from)")
	pf.StringVar(&caKey, "ca-key", "", "the CA's key (default: <certs-dir>/ca.key)")
	pf.DurationVar(&lifetime, "lifetime", 0, "validity of the certificate (default: 5 years for a CA, 1 year otherwise)")
	pf.BoolVar(&overwrite, "overwrite", false, "replace existing files")

	life := func(def time.Duration) (time.Duration, error) {
		if lifetime == 0 {
			return def, nil
		}
		if lifetime < 0 {
			return 0, fmt.Errorf("--lifetime %v: want a positive duration", lifetime)
		}
		return lifetime, nil
	}
	loadCA := func() (*certs.CA, error) {
		key := caKey
		if key == "" {
			key = filepath.Join(dir, certs.CAKey)
		}
		return certs.LoadCA(filepath.Join(dir, certs.CACert), key)
	}

	createCA := &cobra.Command{
		Use:   "create-ca",
		Short: "Create the CA (ca.crt, ca.key)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := life(certs.DefaultCALifetime)
			if err != nil {
				return err
			}
			if _, err := certs.CreateCA(dir, l, overwrite); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", filepath.Join(dir, certs.CACert), filepath.Join(dir, certs.CAKey))
			return nil
		},
	}

	var ids string
	createReplica := &cobra.Command{
		Use:     "create-replica --id ID [HOST...]",
		Aliases: []string{"create-node"},
		Short:   "Create a replica's certificate (replica.<id>.crt, .key) naming its id and the hosts clients dial",
		Long: `create-replica creates the certificate of replica --id, signed by the CA.
HOST arguments (DNS names or IP addresses) are the names clients dial it by;
peers identify it by its id, not its host. --id 1,2,3 names several replicas
in one certificate (for up, which runs them in one process).`,
		RunE: func(cmd *cobra.Command, hosts []string) error {
			list, err := parseIDs(ids)
			if err != nil {
				return err
			}
			l, err := life(certs.DefaultCertLifetime)
			if err != nil {
				return err
			}
			ca, err := loadCA()
			if err != nil {
				return err
			}
			if err := ca.CreateReplica(dir, list, hosts, l, overwrite); err != nil {
				return err
			}
			crt, key := certs.ReplicaFiles(list[0])
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", filepath.Join(dir, crt), filepath.Join(dir, key))
			return nil
		},
	}
	createReplica.Flags().StringVar(&ids, "id", "", "the replica's id (comma-separated for several), required")

	createClient := &cobra.Command{
		Use:   "create-client NAME",
		Short: "Create a client certificate (client.<name>.crt, .key)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := life(certs.DefaultCertLifetime)
			if err != nil {
				return err
			}
			ca, err := loadCA()
			if err != nil {
				return err
			}
			if err := ca.CreateClient(dir, args[0], l, overwrite); err != nil {
				return err
			}
			crt, key := certs.ClientFiles(args[0])
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s and %s\n", filepath.Join(dir, crt), filepath.Join(dir, key))
			return nil
		},
	}
	cmd.AddCommand(createCA, createReplica, createClient)
	return cmd
}

// parseIDs parses "1" or "1,2,3": positive replica ids.
func parseIDs(s string) ([]uint64, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("--id is required: the replica's id")
	}
	var ids []uint64
	for _, p := range strings.Split(s, ",") {
		id, err := strconv.ParseUint(strings.TrimSpace(p), 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("--id: %q is not a positive integer", p)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
