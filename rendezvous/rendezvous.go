package rendezvous

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tmmu/tmmu/internal/logbridge"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

const (
	// DefaultPrefix is the key prefix used when New is given an empty prefix.
	DefaultPrefix = "/tmmu"
	// DefaultTTL is the lease TTL in seconds used when New is given 0.
	DefaultTTL int64 = 10

	// cleanupTimeout bounds the best-effort revoke of a lease granted by a
	// Claim that failed.
	cleanupTimeout = 5 * time.Second

	// maxWorld bounds the world size so that Members cannot be asked to
	// allocate an absurd slice.
	maxWorld = 1 << 24
)

var (
	// ErrJobFull is returned by Claim when every rank of the job is held by
	// a live identity or reserved by an identity that may come back.
	ErrJobFull = errors.New("rendezvous: job has no free rank")
	// ErrInvalidArgument is wrapped by errors caused by bad arguments
	// (world 0 or above 1<<24, empty job or identity, '/' in a job or
	// identity).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrBadReservation is returned by Claim when the identity's own
	// reservation cannot be used: its identity key holds no rank number,
	// names a rank another identity also reserves or one outside the
	// world, or its rank key is held by another identity. Other identities
	// of the job claim as usual; an operator removes the key (Forget,
	// tmmu rank release).
	ErrBadReservation = errors.New("rendezvous: the identity's reservation cannot be used")
	// ErrTakenOver is returned by Reclaim when the identity's reservation
	// was written after the claim being renewed: another process with
	// the same identity (a replacement) claimed the rank since, or an
	// operator released it. The older process must stop, not take the
	// rank back.
	ErrTakenOver = errors.New("rendezvous: the rank was claimed again by a newer holder of the identity")
)

// Client claims ranks for jobs in etcd.
type Client struct {
	cli    *clientv3.Client
	prefix string
	ttl    int64
}

// New wraps an etcd client. prefix is the key prefix (default "/tmmu" when
// empty; trailing slashes are dropped); ttl the lease TTL in seconds (default
// 10 when 0 or negative). Note that etcd raises TTLs below its minimum (about
// 2 s with default election settings).
func New(cli *clientv3.Client, prefix string, ttl int64) *Client {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	prefix = strings.TrimRight(prefix, "/")
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Client{cli: cli, prefix: prefix, ttl: ttl}
}

// Claim is a rank held by an identity under a lease.
type Claim struct {
	Job      string
	Rank     uint64
	Identity string
	Lease    clientv3.LeaseID
	// Revision is the etcd revision of the claiming transaction. It grows
	// with every claim of the job, so it can be used as a fencing token.
	Revision int64

	cli     *clientv3.Client
	session *concurrency.Session // the lease and its keepalive

	mu       sync.Mutex
	released bool
}

// Lost is closed when the lease is lost: the keepalive stopped (Release, the
// Claim context ended, the etcd client was closed or its stream failed) or
// the lease expired or was revoked.
func (c *Claim) Lost() <-chan struct{} { return c.session.Done() }

// Release revokes the lease (the rank key disappears, the identity key stays
// so the identity can come back) and stops keepalives. It is idempotent: once
// a Release has succeeded, later calls return nil. A lease that already
// expired counts as released.
func (c *Claim) Release(ctx context.Context) error {
	c.session.Orphan()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return nil
	}
	if err := revoke(ctx, c.cli, c.Lease); err != nil {
		return fmt.Errorf("rendezvous: release rank %d of job %q: %w", c.Rank, c.Job, err)
	}
	c.released = true
	return nil
}

// stopKeepAlive stops renewing the lease without revoking it, as if the
// worker had hung; the lease then expires after its TTL. Test hook.
func (c *Claim) stopKeepAlive() { c.session.Orphan() }

func revoke(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID) error {
	_, err := cli.Revoke(ctx, id)
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return err
	}
	return nil
}

// Member is one rank of a job as seen by Members.
type Member struct {
	Rank     uint64
	Identity string // identity that reserved the rank; "" if nobody reserved it
	Present  bool   // the rank key exists (held under a live lease)
}

func (c *Client) jobPrefix(job string) string { return c.prefix + "/jobs/" + job + "/" }

func (c *Client) rankKey(job string, rank uint64) string {
	return c.jobPrefix(job) + "ranks/" + strconv.FormatUint(rank, 10)
}

func (c *Client) identityKey(job, identity string) string {
	return c.jobPrefix(job) + "identities/" + identity
}

func validName(what, s string) error {
	if s == "" {
		return fmt.Errorf("rendezvous: empty %s: %w", what, ErrInvalidArgument)
	}
	if strings.Contains(s, "/") {
		return fmt.Errorf("rendezvous: %s %q contains '/': %w", what, s, ErrInvalidArgument)
	}
	return nil
}

func validate(job string, world uint64, identity *string) error {
	if err := validName("job", job); err != nil {
		return err
	}
	if world == 0 || world > maxWorld {
		return fmt.Errorf("rendezvous: world size %d for job %q not in 1..%d: %w", world, job, maxWorld, ErrInvalidArgument)
	}
	if identity != nil {
		return validName("identity", *identity)
	}
	return nil
}

// jobState is a snapshot of a job's keys at one revision.
type jobState struct {
	rev        int64
	ranks      map[uint64]*mvccKV // rank -> rank key
	identities map[string]*mvccKV // identity -> identity key
	reserved   map[uint64]string  // rank -> identity reserving it
	// bad holds the identities whose reservation is unusable (a
	// malformed value, or a rank another identity reserved first), with
	// why; problems describes every key read skipped.
	bad      map[string]string
	problems []string
}

type mvccKV struct {
	value       string
	modRevision int64
}

// read loads every key of job at a single revision.
func (c *Client) read(ctx context.Context, job string) (*jobState, error) {
	p := c.jobPrefix(job)
	resp, err := c.cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("rendezvous: read job %q: %w", job, err)
	}
	st := &jobState{
		rev:        resp.Header.Revision,
		ranks:      map[uint64]*mvccKV{},
		identities: map[string]*mvccKV{},
		reserved:   map[uint64]string{},
		bad:        map[string]string{},
	}
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), p)
		v := &mvccKV{value: string(kv.Value), modRevision: kv.ModRevision}
		switch {
		case strings.HasPrefix(k, "ranks/"):
			r, err := strconv.ParseUint(strings.TrimPrefix(k, "ranks/"), 10, 64)
			if err != nil || r >= maxWorld {
				st.problems = append(st.problems, fmt.Sprintf("rank key %q is not a rank number: skipped", kv.Key))
				continue
			}
			st.ranks[r] = v
		case strings.HasPrefix(k, "identities/"):
			id := strings.TrimPrefix(k, "identities/")
			r, err := strconv.ParseUint(v.value, 10, 64)
			var why string
			switch other, dup := st.reserved[r]; {
			case err != nil || r >= maxWorld:
				why = fmt.Sprintf("identity key %q holds %q, not a rank number", kv.Key, truncate(v.value))
			case dup:
				why = fmt.Sprintf("identity key %q reserves rank %d, which identity %q reserves too", kv.Key, r, other)
			}
			if why != "" {
				st.bad[id] = why
				st.problems = append(st.problems, why+": skipped")
				continue
			}
			st.identities[id] = v
			st.reserved[r] = id
		default:
			st.problems = append(st.problems, fmt.Sprintf("key %q is not a rank or identity key: skipped", kv.Key))
		}
	}
	if n := len(st.problems); n > maxProblems {
		st.problems = append(st.problems[:maxProblems], fmt.Sprintf("and %d more skipped keys", n-maxProblems))
	}
	return st, nil
}

// Claim gives identity a rank of job (world ranks 0..world-1):
//   - if identity already owns a rank of this job (its identity key exists),
//     it gets that same rank back with a new lease, in a transaction fenced by
//     the identity key's ModRevision (and the rank key's revision). This also
//     applies when an earlier claim of the same identity is still live: the
//     rank key is overwritten with the new lease and the earlier claim is stale
//     (compare Revision);
//   - otherwise it takes the lowest rank that is neither present nor reserved,
//     in a transaction requiring CreateRevision == 0 on the rank key and on the
//     identity key and no change to the job's reservations, retrying on
//     conflict;
//   - ErrJobFull when every rank is present or reserved: a rank reserved by an
//     absent identity is not given to another identity (see Forget).
//
// The lease is kept alive in the background until Release, cancellation of
// ctx, or loss of the lease; see Lost.
func (c *Client) Claim(ctx context.Context, job string, world uint64, identity string) (*Claim, error) {
	if err := validate(job, world, &identity); err != nil {
		return nil, err
	}
	return c.leased(ctx, job, world, identity, 0)
}

// leased grants a lease, kept alive until ctx ends or the claim is
// released, and claims under it (claim, with fence); a failed claim
// revokes its lease.
func (c *Client) leased(ctx context.Context, job string, world uint64, identity string, fence int64) (*Claim, error) {
	// An etcd session grants the lease and keeps it alive until ctx
	// ends or the session is orphaned (Release).
	s, err := concurrency.NewSession(c.cli, concurrency.WithTTL(int(c.ttl)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("rendezvous: lease for %q in job %q: %w", identity, job, err)
	}
	cl := &Claim{Job: job, Identity: identity, Lease: s.Lease(), cli: c.cli, session: s}
	rank, rev, err := c.claim(ctx, job, world, identity, s.Lease(), fence)
	if err != nil {
		s.Orphan()
		c.cleanup(ctx, s.Lease())
		return nil, err
	}
	cl.Rank, cl.Revision = rank, rev
	return cl, nil
}

// Reclaim claims prev's rank again under a new lease, after prev's lease
// was lost (Lost closed), only if nothing wrote the identity's
// reservation since prev's claim: otherwise a newer process of the same
// identity holds the rank now (or an operator released it), and Reclaim
// fails with ErrTakenOver without touching any key. The check and the
// claim are one transaction, fenced on the reservation's revision.
func (c *Client) Reclaim(ctx context.Context, prev *Claim, world uint64) (*Claim, error) {
	if err := validate(prev.Job, world, &prev.Identity); err != nil {
		return nil, err
	}
	return c.leased(ctx, prev.Job, world, prev.Identity, prev.Revision)
}

// cleanup revokes a lease granted by a failed Claim, even if ctx is done.
func (c *Client) cleanup(ctx context.Context, id clientv3.LeaseID) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	_ = revoke(rctx, c.cli, id) // best effort: otherwise the lease expires after its TTL
}

// claim runs the read/transaction loop of Claim and returns the rank and the
// revision of the successful transaction. A fence above 0 is the revision
// of the claim being renewed (Reclaim): the identity's reservation must
// still be the one it wrote.
func (c *Client) claim(ctx context.Context, job string, world uint64, identity string, lease clientv3.LeaseID, fence int64) (uint64, int64, error) {
	idKey := c.identityKey(job, identity)
	for {
		if err := ctx.Err(); err != nil {
			return 0, 0, fmt.Errorf("rendezvous: claim for %q in job %q: %w", identity, job, err)
		}
		st, err := c.read(ctx, job)
		if err != nil {
			return 0, 0, err
		}

		var (
			rank  uint64
			conds []clientv3.Cmp
		)
		if why, ok := st.bad[identity]; ok {
			return 0, 0, fmt.Errorf("%w: job %q: %s (remove it: tmmu rank release %s %s)", ErrBadReservation, job, why, job, identity)
		}
		if fence > 0 {
			idKV, ok := st.identities[identity]
			switch {
			case !ok:
				return 0, 0, fmt.Errorf("%w: job %q: identity %q no longer reserves a rank (released since its claim at revision %d)", ErrTakenOver, job, identity, fence)
			case idKV.modRevision != fence:
				return 0, 0, fmt.Errorf("%w: job %q: identity %q claimed its rank again at revision %d, after this claim at %d", ErrTakenOver, job, identity, idKV.modRevision, fence)
			}
		}
		if idKV, ok := st.identities[identity]; ok {
			// Resume the reserved rank.
			rank, _ = strconv.ParseUint(idKV.value, 10, 64) // validated by read
			if rank >= world {
				return 0, 0, fmt.Errorf("%w: identity %q of job %q reserves rank %d, outside world size %d (tmmu rank release %s %s)", ErrBadReservation, identity, job, rank, world, job, identity)
			}
			rk := c.rankKey(job, rank)
			conds = append(conds, clientv3.Compare(clientv3.ModRevision(idKey), "=", idKV.modRevision))
			if rkv, ok := st.ranks[rank]; ok {
				if rkv.value != identity {
					return 0, 0, fmt.Errorf("%w: job %q: rank %d is reserved by identity %q but held by identity %q", ErrBadReservation, job, rank, identity, rkv.value)
				}
				conds = append(conds, clientv3.Compare(clientv3.ModRevision(rk), "=", rkv.modRevision))
			} else {
				conds = append(conds, clientv3.Compare(clientv3.CreateRevision(rk), "=", 0))
			}
		} else {
			// Take the lowest free rank.
			found := false
			for r := uint64(0); r < world; r++ {
				_, present := st.ranks[r]
				_, reserved := st.reserved[r]
				if !present && !reserved {
					rank, found = r, true
					break
				}
			}
			if !found {
				return 0, 0, fmt.Errorf("%w (job %q, world %d, identity %q)", ErrJobFull, job, world, identity)
			}
			conds = append(conds,
				clientv3.Compare(clientv3.CreateRevision(c.rankKey(job, rank)), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(idKey), "=", 0),
				// No reservation of the job was created or changed since the read.
				clientv3.Compare(clientv3.ModRevision(c.jobPrefix(job)+"identities/"), "<", st.rev+1).WithPrefix(),
			)
		}

		resp, err := c.cli.Txn(ctx).If(conds...).Then(
			clientv3.OpPut(c.rankKey(job, rank), identity, clientv3.WithLease(lease)),
			clientv3.OpPut(idKey, strconv.FormatUint(rank, 10)),
		).Commit()
		if err != nil {
			return 0, 0, fmt.Errorf("rendezvous: claim rank %d for %q in job %q: %w", rank, identity, job, err)
		}
		if resp.Succeeded {
			return rank, resp.Header.Revision, nil
		}
		// Lost a race with another claimer or a Forget: read again.
	}
}

// maxProblems bounds the skipped keys Survey describes one by one (what
// tmmu status shows per job); the rest are counted.
const maxProblems = 16

// truncate shortens a value read from etcd for a message.
func truncate(s string) string {
	if len(s) > 32 {
		return s[:32] + "..."
	}
	return s
}

// Forget removes identity's reservation (identity key) so its rank can go to
// another identity; used by operators replacing a worker for good. It does
// not touch the rank key: if the forgotten worker is still live, its rank
// becomes free only when its lease ends. Forgetting an unknown identity is
// not an error.
func (c *Client) Forget(ctx context.Context, job, identity string) error {
	if err := validName("job", job); err != nil {
		return err
	}
	if err := validName("identity", identity); err != nil {
		return err
	}
	if _, err := c.cli.Delete(ctx, c.identityKey(job, identity)); err != nil {
		return fmt.Errorf("rendezvous: forget %q in job %q: %w", identity, job, err)
	}
	return nil
}

// ForgetJob removes every key of job: its reservations and its rank
// keys (a live worker's lease stays, carrying nothing). For a deleted
// job, whose workers stop: a job submitted again under the name starts
// with no reservations. It returns how many keys it removed.
func (c *Client) ForgetJob(ctx context.Context, job string) (int64, error) {
	if err := validName("job", job); err != nil {
		return 0, err
	}
	resp, err := c.cli.Delete(ctx, c.jobPrefix(job), clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("rendezvous: forget job %q: %w", job, err)
	}
	return resp.Deleted, nil
}

// Members lists ranks 0..world-1 with the identity that reserved each one and
// whether it is present (its rank key exists). A rank still held by an
// identity that was forgotten is present with an empty Identity.
// Reservations of ranks outside 0..world-1 are not listed.
func (c *Client) Members(ctx context.Context, job string, world uint64) ([]Member, error) {
	ms, _, err := c.Survey(ctx, job, world)
	return ms, err
}

// Survey is Members, with the keys of job that Claim, Members and
// Missing skip because they are malformed (not a rank key, not a rank
// number, a rank two identities reserve), each with why; from one read.
func (c *Client) Survey(ctx context.Context, job string, world uint64) ([]Member, []string, error) {
	if err := validate(job, world, nil); err != nil {
		return nil, nil, err
	}
	st, err := c.read(ctx, job)
	if err != nil {
		return nil, nil, err
	}
	ms := make([]Member, world)
	for r := range ms {
		rank := uint64(r)
		_, present := st.ranks[rank]
		ms[r] = Member{Rank: rank, Identity: st.reserved[rank], Present: present}
	}
	return ms, st.problems, nil
}

// Missing returns, sorted, the ranks of 0..world-1 that are not present:
// those reserved by an identity whose rank key is gone, and those neither
// reserved nor held. A rank still held by a forgotten identity is present,
// so it is not missing.
func (c *Client) Missing(ctx context.Context, job string, world uint64) ([]uint64, error) {
	ms, err := c.Members(ctx, job, world)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, m := range ms {
		if !m.Present {
			out = append(out, m.Rank)
		}
	}
	return out, nil // Members is in rank order, so out is sorted
}

// Dial returns an etcd client for endpoints with the settings tmmu's
// daemons use: a 5 s dial timeout, and the client's warnings and errors
// in log (nil: dropped); with tlsCfg (trust.TLSFiles.Client), https
// endpoints and a client certificate.
func Dial(endpoints []string, tlsCfg *tls.Config, log *slog.Logger) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: logbridge.Zap(log, "etcd", zap.WarnLevel), TLS: tlsCfg})
}

// HeldAt reports whether identity holds rank of job under the claim it
// made at etcd revision rev (Claim.Revision), which a worker names in what
// it reports: the identity still reserves the rank, and has since at
// least rev (the identity key was created at or before rev and last
// written at or after it: a reservation that was forgotten and made again
// does not count for a claim before that), and the claim's transaction at
// rev wrote the rank key with the identity — checked from etcd's history
// unless it has compacted rev away. A revision ahead of etcd's is
// refused. Errors are etcd's (unreachable): the caller asks again later;
// false means the report is not the holder's.
func (c *Client) HeldAt(ctx context.Context, job string, rank uint64, identity string, rev int64) (bool, error) {
	if err := validName("job", job); err != nil {
		return false, err
	}
	if err := validName("identity", identity); err != nil || rev <= 0 {
		return false, nil
	}
	idr, err := c.cli.Get(ctx, c.identityKey(job, identity))
	if err != nil {
		return false, fmt.Errorf("rendezvous: reservation of %q in job %q: %w", identity, job, err)
	}
	if len(idr.Kvs) != 1 {
		return false, nil
	}
	res := idr.Kvs[0]
	if string(res.Value) != strconv.FormatUint(rank, 10) || res.CreateRevision > rev || rev > res.ModRevision {
		return false, nil
	}
	resp, err := c.cli.Get(ctx, c.rankKey(job, rank), clientv3.WithRev(rev))
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		return true, nil // the reservation answers
	case errors.Is(err, rpctypes.ErrFutureRev):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("rendezvous: rank %d of job %q at revision %d: %w", rank, job, rev, err)
	}
	return len(resp.Kvs) == 1 && resp.Kvs[0].ModRevision == rev && string(resp.Kvs[0].Value) == identity, nil
}
