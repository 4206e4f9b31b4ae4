package transport

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/tmmu/tmmu/internal/natstest"
	"github.com/tmmu/tmmu/ir"
)

func TestMain(m *testing.M) {
	// Every test shuts its embedded server down (Shutdown, WaitForShutdown)
	// and closes its connections in Cleanup, so nothing may be left over.
	goleak.VerifyTestMain(m)
}

// startServer runs an embedded nats-server with JetStream on a random port
// and shuts it down when tb ends.
func startServer(tb testing.TB) *server.Server {
	tb.Helper()
	return natstest.JetStream(tb)
}

// connect opens a connection to s, closed when tb ends (before the server
// shuts down: cleanups run last-in first-out).
func connect(tb testing.TB, s *server.Server) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(0))
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// newTransport connects to s and returns a Transport on the connection.
func newTransport(tb testing.TB, s *server.Server, opts ...Option) (*Transport, *nats.Conn) {
	tb.Helper()
	nc := connect(tb, s)
	tr, err := New(nc, opts...)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return tr, nc
}

// hashOf returns a deterministic, non-zero test hash.
func hashOf(format string, args ...any) ir.Hash {
	return sha256.Sum256(fmt.Appendf(nil, format, args...))
}

// planHashes returns the expected hashes of a world of n ranks in epoch e.
func planHashes(job string, epoch uint64, n int) []ir.Hash {
	hs := make([]ir.Hash, n)
	for r := range hs {
		hs[r] = hashOf("%s/%d/%d", job, epoch, r)
	}
	return hs
}

func report(job string, epoch, rank uint64, h ir.Hash) PlanReport {
	return PlanReport{Job: job, Epoch: epoch, Rank: rank, Identity: fmt.Sprintf("worker-%d", rank), PlanHash: h}
}
