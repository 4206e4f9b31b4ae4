package main

import (
	"fmt"
	"io"
	"time"

	"github.com/tmmu/tmmu/transport"
	"github.com/tmmu/tmmu/trust"
)

var secretsCmd = &command{
	name: "secrets",
	summary: "Write (or complete) a cluster's credentials in DIR: a CA, certificates for the coordinators, NATS, etcd, workers and operators, " +
		"one NATS nkey per coordinator and worker with the NATS authorization that scopes each worker to its own keys and subjects, " +
		"the coordinators' decision-signing key and its public key, the API token and the read token. Files that exist are kept, " +
		"so running it again with more workers adds only theirs (reload NATS to take the new auth.conf).",
	usage: "secrets init DIR --coordinators c1,c2,c3 --workers w0,w1 [--hosts h1,h2] [--valid 8760h] [--readable] [-o text|json]",
	run:   runSecrets,
}

func runSecrets(c *command, e *env, args []string) error {
	if _, err := subcommand(c, e, args, "init"); err != nil {
		return err
	}
	fs := newFlags(e, c)
	coords := fs.String("coordinators", "", "coordinator ids, comma-separated (each gets a certificate for its id, localhost, 127.0.0.1 and --hosts)")
	workers := fs.String("workers", "", "worker identities, comma-separated (each gets a client certificate and a NATS nkey)")
	operators := fs.String("operators", "operator", "operator ids, comma-separated (a client certificate each)")
	hosts := fs.String("hosts", "", "more DNS names or IP addresses for every server certificate (coordinators, nats, etcd)")
	valid := fs.Duration("valid", 365*24*time.Hour, "how long the certificates are valid (the CA: 10 years)")
	readable := fs.Bool("readable", false, "write key files 0644 (inside the 0700 directory) for containers that run as another user")
	out := fs.String("o", "text", "output: text or json")
	pos, err := parse(fs, args[1:])
	if err != nil {
		return err
	}
	if err := outputFormat(e, *out, "text", "json"); err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("secrets init takes one directory")
	}
	plan := trust.Plan{Coordinators: split(*coords), Workers: split(*workers), Operators: split(*operators), Hosts: split(*hosts),
		ValidFor: *valid, FilesReadable: *readable}
	users, err := trust.Generate(pos[0], plan, transport.NATSAuthorizationOf)
	if err != nil {
		return err
	}
	l := trust.Layout{Dir: pos[0]}
	return emit(e, *out, map[string]any{"dir": pos[0], "nats_users": users, "ca": l.CACert(), "nats_auth": l.NATSAuth()}, func(w io.Writer) {
		fmt.Fprintf(w, "credentials in %s: CA %s, NATS authorization %s (%d identities), signing key %s, public key %s, API token %s, read token %s\n",
			pos[0], l.CACert(), l.NATSAuth(), len(users), l.SigningKey(), l.VerifyKey(), l.APIToken(), l.ReadToken())
		for _, u := range users {
			fmt.Fprintf(w, "  %-12s %-16s nkey %s\n", u.Role, u.ID, u.Nkey)
		}
	})
}
