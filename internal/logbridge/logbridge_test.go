package logbridge

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
)

func capture() (*slog.Logger, *bytes.Buffer) {
	var buf bytes.Buffer
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}})), &buf
}

// TestRaftAndEtcdLogsReachSlog: hclog and zap records arrive as slog
// records with their level, message and fields.
func TestRaftAndEtcdLogsReachSlog(t *testing.T) {
	log, buf := capture()
	h := Hclog(log, "raft", hclog.Info)
	h.Info("entering leader state", "leader", "c0")
	h.Info("initial configuration", "servers", hclog.Fmt("%+v", []struct{ ID string }{{"c0"}}))
	h.Debug("below the level")
	h.Warn("heartbeat timeout reached, starting election", "last-leader-addr", "127.0.0.1:7001")
	z := Zap(log, "etcd", zap.WarnLevel)
	z.Info("below the level")
	z.Warn("retrying of unary invoker failed", zap.String("target", "etcd-endpoints://0x1/127.0.0.1:2379"), zap.Int("attempt", 3))
	z.Named("lease").With(zap.Int64("id", 7)).Error("keepalive failed", zap.Error(errors.New("stream closed")))
	got := buf.String()
	for _, want := range []string{
		`level=INFO msg="entering leader state" component=raft leader=c0`,
		`level=WARN msg="heartbeat timeout reached, starting election" component=raft last-leader-addr=127.0.0.1:7001`,
		`level=WARN msg="retrying of unary invoker failed" component=etcd attempt=3 target=etcd-endpoints://0x1/127.0.0.1:2379`,
		`level=INFO msg="initial configuration" component=raft servers=[{ID:c0}]`,
		`level=ERROR msg="keepalive failed" component=etcd error="stream closed" id=7 logger=lease`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %s in\n%s", want, got)
		}
	}
	if strings.Contains(got, "below the level") {
		t.Errorf("a record below the level got through:\n%s", got)
	}
}
