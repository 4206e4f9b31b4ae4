package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/transport"
	"github.com/tmmu/tmmu/trust"
)

// ReadSecret reads a secret (a password, a token) from a file, without
// the trailing newline. Secrets come from files or the environment,
// never from an image.
func ReadSecret(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := strings.TrimRight(string(data), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}

// Secret returns value, or the contents of file when value is empty and
// file is set.
func Secret(value, file string) (string, error) {
	if value != "" || file == "" {
		return value, nil
	}
	return ReadSecret(file)
}

// NATSFlags registers --nats-user, --nats-password and
// --nats-password-file on fs; the function it returns gives the connect
// options once the flags (and ApplyEnv) are parsed.
func NATSFlags(fs *flag.FlagSet) func() ([]nats.Option, error) {
	user := fs.String("nats-user", "", "NATS user (when the server requires credentials)")
	password := fs.String("nats-password", "", "NATS password")
	file := fs.String("nats-password-file", "", "read the NATS password from this file")
	return func() ([]nats.Option, error) { return NATSAuth(*user, *password, *file) }
}

// NATSAuth returns the connect option for a NATS user and password (the
// password given directly or in a file); none when user is empty.
func NATSAuth(user, password, passwordFile string) ([]nats.Option, error) {
	if user == "" {
		return nil, nil
	}
	pw, err := Secret(password, passwordFile)
	if err != nil {
		return nil, fmt.Errorf("NATS password: %w", err)
	}
	return []nats.Option{nats.UserInfo(user, pw)}, nil
}

// Logger returns the daemons' logger: slog text (format "text") or JSON
// (format "json", for containers) on w.
func Logger(w io.Writer, format string, level slog.Level) (*slog.Logger, error) {
	o := &slog.HandlerOptions{Level: level}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("log format %q: want text or json", format)
}

// Healthcheck is the daemons' "healthcheck URL" subcommand, for container
// healthchecks in images with no shell: it exits 0 when GET url answers
// 200 within the timeout. An https URL is checked against the CA in
// TMMU_TLS_CA.
func Healthcheck(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: healthcheck URL")
		return 2
	}
	c := &http.Client{Timeout: 3 * time.Second}
	if ca := os.Getenv(EnvName("tls-ca")); ca != "" && strings.HasPrefix(args[0], "https://") {
		cfg, err := trust.TLSFiles{CA: ca}.Client()
		if err != nil {
			fmt.Fprintln(os.Stderr, "healthcheck:", err)
			return 1
		}
		c.Transport = &http.Transport{TLSClientConfig: cfg}
	}
	resp, err := c.Get(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "healthcheck:", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(os.Stderr, "healthcheck:", args[0], resp.Status)
		return 1
	}
	return 0
}

// DialNATS connects to NATS and opens the transport, as the daemons do:
// forever reconnecting (every 250 ms, with jitter), and waiting — rather
// than failing — while NATS or its JetStream (or, for a worker, the
// buckets the coordinators create) is not up yet, until ctx ends. extra
// adds connect options (credentials), trOpts transport options.
func DialNATS(ctx context.Context, url, name string, log *slog.Logger, extra []nats.Option, trOpts ...transport.Option) (*nats.Conn, *transport.Transport, error) {
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second), nats.RetryOnFailedConnect(true)}, extra...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("nats %s: %w", url, err)
	}
	for try := 0; ; try++ {
		tr, err := transport.New(nc, append([]transport.Option{transport.WithTimeout(5 * time.Second)}, trOpts...)...)
		if err == nil {
			return nc, tr, nil
		}
		if try == 0 {
			log.Warn("waiting for NATS with JetStream", "url", url, "err", err)
		}
		select {
		case <-ctx.Done():
			nc.Close()
			return nil, nil, ctx.Err()
		case <-time.After(min(time.Duration(try+1)*250*time.Millisecond, 2*time.Second)):
		}
	}
}

// CheckpointStore returns the checkpoint store the daemons use: the
// directory dir when set (one machine, or a shared file system), else
// the JetStream object store bucket on tr's connection.
func CheckpointStore(ctx context.Context, dir string, tr *transport.Transport) (checkpoint.Store, error) {
	if dir != "" {
		return checkpoint.NewDirStore(dir)
	}
	return checkpoint.WaitNATSStore(ctx, tr.JetStream(), checkpoint.NATSConfig{})
}

// Main is a daemon's main: "healthcheck URL" probes an endpoint (for
// container healthchecks); anything else runs run, and an error is
// printed as "name: error" with exit status 1.
func Main(name string, args []string, stderr io.Writer, run func([]string, io.Writer) error) int {
	if len(args) > 0 && args[0] == "healthcheck" {
		return Healthcheck(args[1:])
	}
	if err := run(args, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h or --help: the flags were printed
		}
		fmt.Fprintln(stderr, name+":", err)
		return 1
	}
	return 0
}
