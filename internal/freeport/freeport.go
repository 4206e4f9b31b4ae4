// Package freeport picks loopback TCP ports for servers that tests and
// the one-machine cluster start, stop and start again on the same port.
//
// A port the kernel hands out for "127.0.0.1:0" lies in its ephemeral
// range, the range it hands out again to every other listener on port 0
// and takes the local ports of outgoing connections from. Once the
// server on such a port stops, any process on the machine may be given
// that port (go test ./... runs packages side by side, each starting
// HTTP, NATS and etcd servers on port 0), and restarting the server then
// fails with "address already in use" for as long as the other holds it:
// coord's leader-loss test failed so on a loaded machine, when the
// stopped leader came back on its raft port. Port therefore picks ports
// below the ephemeral range where it can read the range (Linux's
// /proc/sys/net/ipv4/ip_local_port_range), which the kernel gives to
// none of those; elsewhere it falls back to a port the kernel picks.
//
// A port is free when Port returns it, not reserved: another process may
// bind it before the caller does. Port starts at a random port and never
// returns the same one twice in a process, so two callers in one test
// binary do not collide, and processes picking at once rarely do.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// lowest is the first port Port considers below the ephemeral range:
// ports under it are often taken by services a machine runs.
const lowest = 10000

var (
	mu     sync.Mutex
	picked = map[int]bool{}
)

// Addr returns "127.0.0.1:PORT" for a port Port picks.
func Addr() (string, error) {
	port, err := Port()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// Port returns a port that was free on 127.0.0.1 a moment ago, below
// the kernel's ephemeral range where that range is known, and never one
// it returned before in this process.
func Port() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	if lo, ok := ephemeralStart(); ok && lo > lowest {
		span := lo - lowest
		start := rand.IntN(span)
		for k := range span {
			port := lowest + (start+k)%span
			if !picked[port] && free(port) {
				picked[port] = true
				return port, nil
			}
		}
	}
	// The range is unknown or every port below it is taken: the kernel
	// picks one (in the ephemeral range).
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("freeport: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !picked[port] {
			picked[port] = true
			return port, nil
		}
	}
}

// free reports whether port can be listened on at 127.0.0.1 now.
func free(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() (int, bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, false
	}
	return parseRange(string(b))
}

// parseRange reads the first port of "LOW HIGH".
func parseRange(s string) (int, bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, false
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo <= 0 || lo > 65535 {
		return 0, false
	}
	return lo, true
}
