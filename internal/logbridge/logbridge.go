// Package logbridge sends the logs of libraries that log their own way —
// hashicorp/raft through hclog, etcd's client through zap — to a daemon's
// slog logger, so that one log shows raft elections and etcd client
// trouble beside tmmu's own records. Each library gets a logger whose
// records go straight to slog (an hclog sink, a zap core): level,
// message, and the fields as attributes.
package logbridge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

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

// Zap returns a zap logger (etcd's client's) whose entries at level and
// above go to log, as component name.
func Zap(log *slog.Logger, name string, level zapcore.Level) *zap.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return zap.New(&core{log: log.With("component", name), level: level})
}

// core is a zapcore.Core that writes to slog.
type core struct {
	log    *slog.Logger
	level  zapcore.Level
	fields []zapcore.Field // from With
}

func (c *core) Enabled(l zapcore.Level) bool { return c.level.Enabled(l) }

func (c *core) With(fs []zapcore.Field) zapcore.Core {
	return &core{log: c.log, level: c.level, fields: append(slices.Clone(c.fields), fs...)}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write logs e with its fields as attributes, by name, and the logger's
// name as "logger".
func (c *core) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range slices.Concat(c.fields, fs) {
		f.AddTo(enc)
	}
	if e.LoggerName != "" {
		enc.Fields["logger"] = e.LoggerName
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for _, k := range slices.Sorted(maps.Keys(enc.Fields)) {
		attrs = append(attrs, slog.Any(k, enc.Fields[k]))
	}
	c.log.LogAttrs(context.Background(), zapLevel(e.Level), e.Message, attrs...)
	return nil
}

func (c *core) Sync() error { return nil }

func zapLevel(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}
