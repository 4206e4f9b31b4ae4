// Package logbridge sends the logs of libraries that log their own way —
// hashicorp/raft through hclog, etcd's client through zap — to a daemon's
// slog logger, so that one log shows raft elections and etcd client
// trouble beside tmmu's own records.
//
// raft gets an hclog logger whose records go straight to slog (Hclog);
// etcd's client a zap logger that writes JSON lines to Writer, which
// turns each line into an slog record: its level, its message, and its
// other fields as attributes (timestamps dropped: slog adds its own).
package logbridge

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Writer returns a writer that logs each JSON line written to it (zap's
// JSON encoder's) as a record of log, with component=name. A line that is not JSON is logged
// whole as the message, at info.
func Writer(log *slog.Logger, name string) io.Writer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &writer{log: log.With("component", name)}
}

type writer struct {
	mu  sync.Mutex
	log *slog.Logger
	buf []byte
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.line(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<16 { // a line without an end: log what came
		w.line(w.buf)
		w.buf = nil
	}
	return len(p), nil
}

// The keys zap's JSON encoder (as Zap configures it) puts the level,
// the message and the time under.
const (
	levelKey   = "level"
	messageKey = "msg"
	timeKey    = "ts"
)

func (w *writer) line(b []byte) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		w.log.Info(string(b))
		return
	}
	level, msg := slog.LevelInfo, ""
	if v, ok := m[levelKey].(string); ok {
		level = parseLevel(v)
	}
	if v, ok := m[messageKey].(string); ok {
		msg = v
	}
	delete(m, levelKey)
	delete(m, messageKey)
	delete(m, timeKey)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		attrs = append(attrs, slog.Any(k, m[k]))
	}
	w.log.LogAttrs(context.Background(), level, msg, attrs...)
}

func parseLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "trace", "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error", "dpanic", "panic", "fatal":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Hclog returns an hclog logger (hashicorp/raft's) whose records at
// level and above go to log, as component name: each record's arguments
// become attributes, a value that is a fmt.Stringer or an error by its
// text.
func Hclog(log *slog.Logger, name string, level hclog.Level) hclog.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := hclog.NewInterceptLogger(&hclog.LoggerOptions{Name: name, Level: hclog.Off, Output: io.Discard})
	l.RegisterSink(&sink{log: log, level: level})
	return l
}

// sink receives an hclog logger's records with their raw arguments.
type sink struct {
	log   *slog.Logger
	level hclog.Level
}

func (s *sink) Accept(name string, level hclog.Level, msg string, args ...any) {
	if level < s.level || level == hclog.Off {
		return
	}
	attrs := []slog.Attr{slog.String("component", name)}
	for i := 0; i+1 < len(args); i += 2 {
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		attrs = append(attrs, slog.Any(key, plain(args[i+1])))
	}
	s.log.LogAttrs(context.Background(), hclogLevel(level), msg, attrs...)
}

// plain returns v, or its text for a fmt.Stringer, an error or an
// hclog.Fmt value (raft logs itself and its peers as Stringers, its
// configuration with hclog.Fmt).
func plain(v any) any {
	switch v := v.(type) {
	case hclog.Format: // hclog.Fmt("%+v", x): a format and its arguments
		if len(v) > 0 {
			if f, ok := v[0].(string); ok {
				return fmt.Sprintf(f, v[1:]...)
			}
		}
		return fmt.Sprint(v...)
	case error:
		return v.Error()
	case fmt.Stringer:
		return v.String()
	}
	return v
}

func hclogLevel(l hclog.Level) slog.Level {
	switch {
	case l <= hclog.Debug:
		return slog.LevelDebug
	case l == hclog.Warn:
		return slog.LevelWarn
	case l >= hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Zap returns a zap logger (etcd's client's) that logs to log at level
// and above, as component name.
func Zap(log *slog.Logger, name string, level zapcore.Level) *zap.Logger {
	enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{MessageKey: "msg", LevelKey: "level", NameKey: "logger",
		EncodeLevel: zapcore.LowercaseLevelEncoder, EncodeDuration: zapcore.StringDurationEncoder, LineEnding: "\n"})
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(Writer(log, name)), level))
}
