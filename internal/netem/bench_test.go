package netem

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// The benchmarks compare a direct loopback connection with one through a
// proxy at 0 ms configured latency: the difference is the proxy's own cost.
//
//	go test -run '^$' -bench . -benchtime 2s ./internal/netem/

func benchTargets(b *testing.B, target string) map[string]string {
	out := map[string]string{"direct": target}
	for name, lat := range map[string]time.Duration{"proxy-0ms": 0, "proxy-200us": 200 * time.Microsecond} {
		p, err := NewProxy(target, Config{Latency: lat})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { p.Close() })
		out[name] = p.Addr()
	}
	return out
}

// BenchmarkRoundTrip measures a 64-byte ping-pong: ns/op is one round trip.
// Through proxy-200us it is 400 µs more than through proxy-0ms when the
// delay line is precise below the runtime timers' millisecond (sleep*.go).
func BenchmarkRoundTrip(b *testing.B) {
	echo := startEcho(b)
	targets := benchTargets(b, echo.addr())
	for _, name := range []string{"direct", "proxy-0ms", "proxy-200us"} {
		b.Run(name, func(b *testing.B) {
			c := dial(b, targets[name])
			msg, got := make([]byte, 64), make([]byte, 64)
			for b.Loop() {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkThroughput streams 64 KiB writes one way into a sink: MB/s is
// the throughput of one connection.
func BenchmarkThroughput(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(io.Discard, c)
				c.Close()
			}()
		}
	}()
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	targets := benchTargets(b, ln.Addr().String())
	for _, name := range []string{"direct", "proxy-0ms"} {
		b.Run(name, func(b *testing.B) {
			c := dial(b, targets[name])
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			// Count the bytes as delivered only when the sink has them.
			c.(*net.TCPConn).CloseWrite()
			io.Copy(io.Discard, c)
		})
	}
}
