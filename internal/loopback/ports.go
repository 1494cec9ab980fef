package loopback

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// FreePorts returns n distinct TCP ports that were free on 127.0.0.1 when
// it returned, for processes started next to listen on (a test's or a
// benchmark's servers).
//
// A port chosen by listening on port 0 comes from the kernel's ephemeral
// range, which outgoing connections also draw from: between the moment it
// is released and the moment the server binds it, any connection made on
// the machine may take it ("address already in use"). FreePorts chooses
// below that range (ip_local_port_range), where only another listener can
// collide, and checks each port by binding it, holding all of them until
// it returns.
func FreePorts(n int) ([]int, error) {
	low := ephemeralLow()
	var (
		ls  []net.Listener
		out []int
	)
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for tries := 0; len(out) < n; tries++ {
		if tries >= 100*n {
			return nil, fmt.Errorf("loopback: no free port found below %d after %d tries", low, tries)
		}
		p := 10000 + rand.IntN(low-10000)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		out = append(out, p)
	}
	return out, nil
}

// ephemeralLow is the lowest port of the kernel's ephemeral range, 32768
// when it cannot be read or leaves too little room below it.
func ephemeralLow() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return fallback
	}
	low, err := strconv.Atoi(f[0])
	if err != nil || low < 12000 {
		return fallback
	}
	return low
}
