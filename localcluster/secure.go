package localcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/tmmu/tmmu/checkpoint"
	"github.com/tmmu/tmmu/coord"
	"github.com/tmmu/tmmu/coord/coordtest"
	"github.com/tmmu/tmmu/internal/cli"
	"github.com/tmmu/tmmu/transport"
	"github.com/tmmu/tmmu/trust"
)

// secrets generates the cluster's credentials under dir and configures
// NATS with TLS and the coordinators' identities.
func (l *Local) secrets(dir string, coordinators int) error {
	ids := []string{admin}
	for i := range coordinators + spareCoordinators {
		ids = append(ids, fmt.Sprintf("c%d", i))
	}
	if _, err := trust.Generate(dir, trust.Plan{Coordinators: ids}, nil); err != nil {
		return fmt.Errorf("localcluster: %w", err)
	}
	l.Secrets = trust.Layout{Dir: dir}
	var err error
	if l.signer, err = trust.LoadSigner(l.Secrets.SigningKey()); err != nil {
		return err
	}
	if l.verifier, err = trust.LoadVerifier(l.Secrets.VerifyKey()); err != nil {
		return err
	}
	if l.apiToken, err = cli.ReadSecret(l.Secrets.APIToken()); err != nil {
		return err
	}
	if l.readToken, err = cli.ReadSecret(l.Secrets.ReadToken()); err != nil {
		return err
	}
	tc, err := l.Secrets.TLS(trust.RoleNATS, trust.RoleNATS).Server(true)
	if err != nil {
		return err
	}
	l.natsOpts.TLSConfig, l.natsOpts.TLS, l.natsOpts.TLSVerify, l.natsOpts.TLSTimeout = tc, true, true, 5
	for _, id := range ids {
		pub, err := l.Secrets.PublicNkey(trust.RoleCoordinator, id)
		if err != nil {
			return err
		}
		l.natsOpts.Nkeys = append(l.natsOpts.Nkeys, nkeyUser(pub, transport.CoordinatorPermissions()))
		l.users[trust.RoleCoordinator+"/"+id] = true
	}
	return nil
}

// spareCoordinators is how many coordinators past the first ones have
// credentials, for nodes a test adds as voters (coordtest.Cluster.Grow).
const spareCoordinators = 3

// nkeyUser returns nats-server's user for an nkey with transport's
// permissions.
func nkeyUser(pub string, p transport.Permissions) *natsserver.NkeyUser {
	return &natsserver.NkeyUser{Nkey: pub, Permissions: &natsserver.Permissions{
		Publish:   &natsserver.SubjectPermission{Allow: p.PublishAllow, Deny: p.PublishDeny},
		Subscribe: &natsserver.SubjectPermission{Allow: p.SubscribeAllow, Deny: p.SubscribeDeny},
	}}
}

// identity returns the nkey seed file of (role, id), creating a worker
// identity's credentials and adding it to the NATS server first if it is
// new.
func (l *Local) identity(role, id string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if role == trust.RoleWorker && !l.users[role+"/"+id] {
		if _, err := trust.Generate(l.Secrets.Dir, trust.Plan{Workers: []string{id}}, nil); err != nil {
			return "", fmt.Errorf("localcluster: worker %q: %w", id, err)
		}
		pub, err := l.Secrets.PublicNkey(role, id)
		if err != nil {
			return "", err
		}
		o := l.natsOpts
		o.Nkeys = append(append([]*natsserver.NkeyUser(nil), l.natsOpts.Nkeys...), nkeyUser(pub, transport.WorkerPermissions(id)))
		served := o // the server keeps &served; l.natsOpts stays ours
		if err := l.NATS.ReloadOptions(&served); err != nil {
			return "", fmt.Errorf("localcluster: adding NATS identity %q: %w", id, err)
		}
		l.natsOpts = o
		l.users[role+"/"+id] = true
	}
	return l.Secrets.Nkey(role, id), nil
}

// coordOptions configures the coordinators: raft over mutual TLS, the API
// over TLS with its tokens, and the IR store in NATS's object store.
func (l *Local) coordOptions(log *slog.Logger) (coordtest.ClusterOptions, error) {
	_, tr, err := l.Transport()
	if err != nil {
		return coordtest.ClusterOptions{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	irs, err := checkpoint.NewNATSStore(ctx, tr.JetStream(), checkpoint.NATSConfig{Bucket: coord.IRBucket})
	if err != nil {
		return coordtest.ClusterOptions{}, err
	}
	type conf struct {
		raft *coord.RaftTLS
		api  *tls.Config
	}
	confs := map[int]conf{}
	get := func(i int) conf {
		if c, ok := confs[i]; ok {
			return c
		}
		files := l.Secrets.TLS(trust.RoleCoordinator, fmt.Sprintf("c%d", i))
		var c conf
		var errs [3]error
		c.raft = &coord.RaftTLS{}
		c.raft.Server, errs[0] = files.Server(true, trust.RoleCoordinator)
		c.raft.Client, errs[1] = files.Client(trust.RoleCoordinator)
		c.api, errs[2] = files.Server(false)
		for _, e := range errs {
			if e != nil {
				log.Error("coordinator TLS", "node", i, "err", e)
			}
		}
		confs[i] = c
		return c
	}
	return coordtest.ClusterOptions{Logger: log,
		Configure: func(i int, c *coord.Config) {
			c.RaftTLS, c.HTTPS, c.APIToken, c.ReadToken, c.IRStore = get(i).raft, true, l.apiToken, l.readToken, irs
		},
		HTTPTLS: func(i int) *tls.Config { return get(i).api },
	}, nil
}
