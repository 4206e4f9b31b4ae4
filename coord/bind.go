package coord

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/transport"
)

// ClaimChecker says whether an identity held a rank's etcd claim at a
// revision (rendezvous.Client.HeldAt). An error means it could not tell
// (etcd unreachable): the report is checked again later, never counted
// on faith.
type ClaimChecker interface {
	HeldAt(ctx context.Context, job string, rank uint64, identity string, rev int64) (bool, error)
}

// claimCache remembers the answers of a ClaimChecker: a claim revision
// names one transaction, so an answer never changes.
type claimCache struct {
	c  ClaimChecker
	mu sync.Mutex
	m  map[claimKey]bool
}

type claimKey struct {
	job, identity string
	rank          uint64
	rev           int64
}

// maxClaimCache bounds the cache; it is cleared when full.
const maxClaimCache = 1 << 16

func (c *claimCache) heldAt(ctx context.Context, job string, rank uint64, identity string, rev int64) (bool, error) {
	k := claimKey{job, identity, rank, rev}
	c.mu.Lock()
	v, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	v, err := c.c.HeldAt(cctx, job, rank, identity, rev)
	if err != nil {
		return false, err
	}
	c.mu.Lock()
	if len(c.m) >= maxClaimCache {
		c.m = map[claimKey]bool{}
	}
	c.m[k] = v
	c.mu.Unlock()
	return v, nil
}

// Kinds of forged reports (tmmu_forged_reports_total's label).
const (
	ForgedPlan       = "plan"
	ForgedProgress   = "progress"
	ForgedCheckpoint = "checkpoint"
	ForgedRecovery   = "recovery"
	ForgedReplan     = "replan"
)

// forged counts and logs a report that does not come from the rank's
// holder.
func (a *agreement) forged(kind, job string, epoch, rank uint64, identity, why string) {
	a.n.metrics.forged.WithLabelValues(kind).Inc()
	a.n.log.Warn("dropped a report that is not the rank's holder's", "kind", kind, "job", job, "epoch", epoch, "rank", rank, "identity", identity, "why", why)
}

// bindPlan says whether a plan report comes from the identity that held
// its rank: the epoch's member (members, for an elastic world), else the holder of
// the rank's etcd claim at the revision the report names. ok false with
// a nil error is a forgery; an error means etcd could not tell yet.
func (a *agreement) bindPlan(ctx context.Context, members []string, r transport.PlanReport) (ok bool, why string, err error) {
	if members != nil {
		if r.Rank < uint64(len(members)) && members[r.Rank] == r.Identity {
			return true, "", nil
		}
		return false, "not the epoch's member of rank " + strconv.FormatUint(r.Rank, 10), nil
	}
	if a.claims == nil {
		return true, "", nil // no etcd: claims are not checked (an unsecured cluster)
	}
	held, err := a.claims.heldAt(ctx, r.Job, r.Rank, r.Identity, r.ClaimRevision)
	if err != nil || held {
		return held, "", err
	}
	return false, "did not hold the rank's claim at revision " + strconv.FormatInt(r.ClaimRevision, 10), nil
}

// announce publishes ann for job j, with its incarnation.
func (a *agreement) announce(j *api.Job, ann transport.Announcement) {
	if j != nil {
		ann.Incarnation = j.Incarnation()
	}
	if err := a.t.PublishAnnouncement(ann); err != nil {
		a.n.log.Debug("announcing", "job", ann.Job, "kind", ann.Kind, "err", err)
	}
}
