// Package natstest starts embedded nats-servers for tests: real servers on
// random loopback ports, shut down when the test ends.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start runs a nats-server with o, waits until it accepts connections and
// shuts it down when tb ends. o should name a loopback host and port -1.
func Start(tb testing.TB, o *server.Options) *server.Server {
	tb.Helper()
	s, err := server.NewServer(o)
	if err != nil {
		tb.Fatalf("nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		tb.Fatal("nats-server not ready for connections after 10s")
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// JetStream starts a server with JetStream on a temporary store.
func JetStream(tb testing.TB) *server.Server {
	tb.Helper()
	return Start(tb, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true})
}
