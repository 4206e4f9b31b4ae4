package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tmmu/tmmu/internal/cli"
	"github.com/tmmu/tmmu/internal/probe"
	"github.com/tmmu/tmmu/trust"
)

var probeCmd = &command{
	name: "probe",
	summary: "Attack a running cluster with one worker identity's credentials (and the API token, for the input attacks) and say which attacks it refused: " +
		"reports in another identity's keys or for ranks the identity does not hold, streams republishing into the coordinators' subjects, " +
		"unsigned outcomes and grants, raft votes without a coordinator certificate, etcd without credentials, a 100 MB submission, a bogus voter, " +
		"window 2^64-1, reads without a token and reads of the datasets store around the coordinators. Exits 1 if the cluster accepted any. Use an identity no running worker holds.",
	usage: "probe --secrets DIR --identity ID --job J --nats URL --etcd URLS --raft ADDRS --coordinators URLS [--worker-metrics URLS] [-o text|json]",
	run:   runProbe,
}

func runProbe(c *command, e *env, args []string) error {
	fs := newFlags(e, c)
	secrets := fs.String("secrets", "", "directory of tmmu secrets init: the CA, the identity's certificate and nkey, the API token")
	identity := fs.String("identity", "", "the worker identity whose credentials the probe holds (one no running worker uses)")
	job := fs.String("job", "", "a running job")
	natsURL := fs.String("nats", nats.DefaultURL, "NATS URL")
	etcd := fs.String("etcd", "https://127.0.0.1:2379", "etcd endpoints, comma-separated (tried without credentials)")
	raftAddrs := fs.String("raft", "", "the coordinators' raft addresses, comma-separated")
	coords := fs.String("coordinators", "https://127.0.0.1:8080", "coordinator API URLs, comma-separated")
	tokenFile := fs.String("token-file", "", "the API token (default: DIR/operator/api-token)")
	workerMetrics := fs.String("worker-metrics", "", "the job's workers' /metrics URLs, comma-separated")
	timeout := fs.Duration("timeout", 15*time.Minute, "give up after this long")
	out := fs.String("o", "text", "output: text or json")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if err := cli.ApplyEnv(fs); err != nil {
		return usagef("%v", err)
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return err
	}
	if *secrets == "" || *identity == "" || *job == "" || *raftAddrs == "" {
		return usagef("probe needs --secrets, --identity, --job and --raft")
	}
	l := trust.Layout{Dir: *secrets}
	if *tokenFile == "" {
		*tokenFile = l.APIToken()
	}
	token, err := cli.ReadSecret(*tokenFile)
	if err != nil {
		return usagef("--token-file: %v", err)
	}
	sec := cli.Security{Insecure: new(bool), Secrets: secrets, CA: new(string), Cert: new(string), Key: new(string), Nkey: new(string)}
	sec.Fill(trust.RoleWorker, *identity, nil)
	natsOpts, err := sec.NATSOptions()
	if err != nil {
		return err
	}
	raftTLS, err := sec.TLS().Client()
	if err != nil {
		return err
	}
	rt, err := sec.CoordinatorTransport()
	if err != nil {
		return err
	}
	t := probe.Target{NATSURL: *natsURL, NATS: natsOpts, Identity: *identity, Etcd: split(*etcd), Raft: split(*raftAddrs), RaftTLS: raftTLS,
		Coordinators: split(*coords), HTTP: &http.Client{Timeout: 30 * time.Second, Transport: rt}, APIToken: token, Job: *job,
		WorkerMetrics: split(*workerMetrics)}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	results, err := probe.Run(ctx, t)
	if err != nil {
		return err
	}
	accepted := 0
	for _, r := range results {
		if !r.Refused {
			accepted++
		}
	}
	if err := emit(e, *out, results, func(w io.Writer) {
		for _, r := range results {
			verdict := "REFUSED "
			if !r.Refused {
				verdict = "ACCEPTED"
			}
			fmt.Fprintf(w, "%s  %s: %s\n", verdict, r.Attack, r.Detail)
		}
		fmt.Fprintf(w, "%d of %d attacks refused\n", len(results)-accepted, len(results))
	}); err != nil {
		return err
	}
	if accepted > 0 {
		return fmt.Errorf("the cluster accepted %d of %d attacks", accepted, len(results))
	}
	return nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
