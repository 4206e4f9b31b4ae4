package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tmmu/tmmu/rendezvous"
)

// claimRank claims this identity's rank, retrying while etcd is
// unreachable or this identity's reservation cannot be used (an operator
// fixes that with tmmu rank release; the wait says so). A job with no
// free rank for this identity is final.
func (w *run) claimRank(ctx context.Context) (*rendezvous.Claim, error) {
	return w.claimRetrying(ctx, "claiming a rank", func() (*rendezvous.Claim, error) {
		return w.cfg.Rendezvous.Claim(ctx, w.cfg.Job, w.world, w.cfg.Identity)
	})
}

// claimRetrying runs claim until it succeeds, retrying with backoff
// (what says what waits) but for the final errors: no free rank, bad
// arguments, a newer holder of the identity, ctx ended.
func (w *run) claimRetrying(ctx context.Context, what string, claim func() (*rendezvous.Claim, error)) (*rendezvous.Claim, error) {
	var since time.Time
	for try := 0; ; try++ {
		c, err := claim()
		if err == nil {
			w.waited(what, try)
			return c, nil
		}
		if errors.Is(err, rendezvous.ErrJobFull) || errors.Is(err, rendezvous.ErrInvalidArgument) || errors.Is(err, rendezvous.ErrTakenOver) || ctx.Err() != nil {
			return nil, err
		}
		w.waiting(what, err, try, &since)
		if err := backoff(ctx, try); err != nil {
			return nil, err
		}
	}
}

// reclaimRank claims the rank of the lost claim again, fenced on its
// revision (rendezvous.Reclaim), retrying while etcd is unreachable; a
// newer holder of the identity ends it with rendezvous.ErrTakenOver.
func (w *run) reclaimRank(ctx context.Context) (*rendezvous.Claim, error) {
	w.claimMu.Lock()
	prev := w.claim
	w.claimMu.Unlock()
	return w.claimRetrying(ctx, "claiming the rank again", func() (*rendezvous.Claim, error) {
		return w.cfg.Rendezvous.Reclaim(ctx, prev, w.world)
	})
}

// claimRevision returns the etcd revision of the rank's current claim,
// which every report names: the leader counts a plan report only if this
// identity held the rank's claim at that revision.
func (w *run) claimRevision() int64 {
	w.claimMu.Lock()
	defer w.claimMu.Unlock()
	if w.claim == nil {
		return 0
	}
	return w.claim.Revision
}

// keepClaim claims the rank again whenever its lease is lost (etcd was
// unreachable for longer than the lease's TTL): the same identity gets
// the same rank, with a new lease, fenced by the identity key's revision.
func (w *run) keepClaim(ctx context.Context) {
	for {
		w.claimMu.Lock()
		lost := w.claim.Lost()
		w.claimMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-lost:
		}
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("the rank lease was lost; claiming the rank again")
		c, err := w.reclaimRank(ctx)
		if errors.Is(err, rendezvous.ErrTakenOver) {
			// A replacement holds the rank now: stop without a request
			// that could disturb it.
			w.log.Error("another worker with this identity holds the rank now: stopping", "err", err)
			w.replaced(fmt.Errorf("%w: %v", ErrReplaced, err))
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				w.log.Error("claiming the rank again", "err", err)
			}
			return
		}
		if c.Rank != w.rank {
			w.log.Error("claimed another rank", "rank", c.Rank, "was", w.rank)
		}
		w.claimMu.Lock()
		w.claim = c
		w.claimMu.Unlock()
		w.mu.Lock()
		w.res.Reclaims++
		w.mu.Unlock()
		if w.cfg.Stats != nil {
			w.cfg.Stats.Reconnected("etcd")
		}
		w.log.Info("claimed the rank again", "rank", c.Rank, "revision", c.Revision)
	}
}
