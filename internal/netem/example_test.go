package netem_test

import (
	"fmt"
	"log"
	"net"

	"github.com/correctables/correctables/internal/netem"
)

// Three replicas on loopback, placed in the regions of the Correctables
// evaluation; a client in IRL dials the replica in FRK through the WAN.
func ExampleNetwork() {
	topo, err := netem.Preset(netem.PresetEC2)
	if err != nil {
		log.Fatal(err)
	}
	var replicas []netem.Replica
	for _, region := range topo.Regions() {
		ln, err := net.Listen("tcp", "127.0.0.1:0") // a replica's real listener
		if err != nil {
			log.Fatal(err)
		}
		defer ln.Close()
		replicas = append(replicas, netem.Replica{Name: "r-" + region, Region: region, Addr: ln.Addr().String()})
	}
	wan, err := netem.NewNetwork(netem.NetworkConfig{Topology: topo, Replicas: replicas})
	if err != nil {
		log.Fatal(err)
	}
	defer wan.Close()

	addr, err := wan.Addr("IRL", "r-FRK") // what a client in IRL dials
	if err != nil {
		log.Fatal(err)
	}
	rtt, _ := topo.RTT("IRL", "FRK")
	fmt.Println(addr != "", rtt)

	_ = wan.Partition("IRL", "FRK") // IRL and FRK stop hearing each other
	_ = wan.Heal("IRL", "FRK")
	// Output: true 20ms
}
