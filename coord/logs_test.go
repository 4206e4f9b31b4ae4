package coord_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/coordtest"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestElectionsAreInTheNodesLog: raft's own records reach the node's slog
// logger (they went to io.Discard before): an election shows.
func TestElectionsAreInTheNodesLog(t *testing.T) {
	var buf syncBuffer
	c, err := coordtest.StartCluster(t.TempDir(), 1, slog.New(slog.NewTextHandler(&buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Leader(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "raft's election records", 10*time.Second, func() bool {
		return strings.Contains(buf.String(), `msg="entering leader state" node=c0 component=raft leader="Node at 127.0.0.1`)
	})
}
