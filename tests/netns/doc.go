// Package netns tests a TLS cluster across network namespaces: three
// `correctables serve` processes, each in a network namespace of its own
// with its own address (ip netns and veth pairs on a bridge, as three hosts
// on one network), secured with certificates made by `correctables cert`.
// The test drives the cluster from the host namespace with the CLI, over
// TLS with a client certificate, and checks that a peer stream with a
// certificate for another replica id, with a client certificate, or with no
// certificate is refused over the network; then that a replica restarted
// with a certificate of another CA is refused by its peers (and refuses
// them), both sides logging it, while the other two go on committing.
//
// It needs root and the ip command (iproute2). Without them it skips,
// unless CORRECTABLES_REQUIRE_NETNS=1 (set by CI), when it fails instead.
// The binary is built once by TestMain, without a time limit of its own.
package netns
