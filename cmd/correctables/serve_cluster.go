package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/pflag"
)

// clusterSettings fix the cluster id of `serve` when its data directory
// has none (the cluster bootstraps, or the directory predates cluster ids):
// a hash of the founding members' ids and peer addresses (--initial-cluster,
// default --peers) and --cluster-token.
type clusterSettings struct {
	ClusterToken   string `json:"cluster_token"`
	InitialCluster string `json:"initial_cluster"`
}

func (c *clusterSettings) register(fs *pflag.FlagSet) {
	fs.StringVar(&c.ClusterToken, "cluster-token", "", "a token that goes into the cluster id, the same on every founding replica, so that two clusters on the same addresses at different times have different ids (as etcd's --initial-cluster-token)")
	fs.StringVar(&c.InitialCluster, "initial-cluster", "", "the founding members as ID=HOST:PORT, the same on every founding replica, that the cluster id is computed from (default: --peers; give it when --peers names some replicas at other addresses than the others use, e.g. through proxies)")
}

// merge returns c (from a config file) with the flags given on the command
// line (in fl, values in flags) taking precedence.
func (c clusterSettings) merge(fl *pflag.FlagSet, flags clusterSettings) clusterSettings {
	if fl.Changed("cluster-token") {
		c.ClusterToken = flags.ClusterToken
	}
	if fl.Changed("initial-cluster") {
		c.InitialCluster = flags.InitialCluster
	}
	return c
}

// initialCluster parses --initial-cluster; nil when it is not given.
func (c clusterSettings) initialCluster() (map[uint64]string, error) {
	if c.InitialCluster == "" {
		return nil, nil
	}
	m, err := parsePeers(c.InitialCluster)
	if err != nil {
		return nil, fmt.Errorf("--initial-cluster: %w", err)
	}
	out := map[uint64]string{}
	for k, v := range m {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil || id == 0 {
			return nil, fmt.Errorf("--initial-cluster: id %q is not a positive integer", k)
		}
		out[id] = v
	}
	return out, nil
}
