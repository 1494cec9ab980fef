package main

import (
	"strings"
	"testing"
)

// status fails when the replicas answer for different clusters, naming
// each cluster and its endpoints; replicas that send no id are left out.
func TestStatusMixedClusters(t *testing.T) {
	same := []statusRow{{Endpoint: "a:1", ClusterID: "00000000000000aa"}, {Endpoint: "a:2", ClusterID: "00000000000000aa"}, {Endpoint: "a:3"}}
	if err := mixedClusters(same); err != nil {
		t.Fatalf("one cluster: %v", err)
	}
	mixed := append(same, statusRow{Endpoint: "a:4", ClusterID: "00000000000000bb"})
	err := mixedClusters(mixed)
	if err == nil {
		t.Fatal("two clusters: no error")
	}
	for _, want := range []string{"different clusters", "cluster 00000000000000aa at a:1, a:2", "cluster 00000000000000bb at a:4"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
