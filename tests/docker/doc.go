// Package docker tests the replica image (the repository's Dockerfile) as
// deployed: three containers on a private docker network, driven from the
// host by the correctables binary through published loopback ports, with a
// replica killed and restarted. It needs a Docker engine; without one, or
// under -short, the test skips.
package docker
