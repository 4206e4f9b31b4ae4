package localcluster

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/shard"
	"github.com/tmmu/tmmu/transport"
)

// BenchmarkAgreementRound times whole agreement rounds on a local cluster:
// the leader commits a new epoch through raft (3 coordinators over TCP);
// then, timed, every rank (a goroutine with its own NATS connection)
// reports its plan hash to the JetStream KV bucket, the leader's watcher
// tallies them, commits the outcome through raft and publishes it, and
// the round ends when every rank has received the outcome.
func BenchmarkAgreementRound(b *testing.B) {
	for _, ranks := range []int{8, 64} {
		b.Run(fmt.Sprintf("ranks=%d", ranks), func(b *testing.B) { benchRound(b, ranks) })
	}
}

func benchRound(b *testing.B, ranks int) {
	l, err := Start(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	li, err := l.Coord.Leader(10 * time.Second)
	if err != nil {
		b.Fatal(err)
	}
	leader := l.Coord.Nodes[li]
	expected := func(e uint64) []ir.Hash {
		hs := make([]ir.Hash, ranks)
		for r := range hs {
			hs[r] = sha256.Sum256(fmt.Appendf(nil, "epoch %d rank %d", e, r))
		}
		return hs
	}
	spec := &api.JobSpec{Name: "bench", ShardSpec: shard.Spec{WorldSize: uint64(ranks)}}
	if _, err := leader.Apply(&api.Command{Kind: api.CmdSubmit, Job: "bench", Spec: spec,
		New: &api.Epoch{Epoch: 0, StartStep: 1, GlobalPlanHash: ir.Hash{1}, Expected: expected(0)}}, 5*time.Second); err != nil {
		b.Fatal(err)
	}
	type rank struct {
		t   *transport.Transport
		got chan transport.Outcome
	}
	rs := make([]rank, ranks)
	for i := range rs {
		_, t, err := l.Transport()
		if err != nil {
			b.Fatal(err)
		}
		rs[i] = rank{t: t, got: make(chan transport.Outcome, 16)}
		if _, err := t.SubscribeOutcomes("bench", func(o transport.Outcome) { rs[i].got <- o }); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	round := func(e uint64) time.Duration {
		hs := expected(e)
		start := time.Now()
		var wg sync.WaitGroup
		for r := range rs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := rs[r].t.Report(ctx, transport.PlanReport{Job: "bench", Epoch: e, Rank: uint64(r), Identity: fmt.Sprint("w", r), PlanHash: hs[r]}); err != nil {
					b.Error(err)
					return
				}
				for o := range rs[r].got {
					if o.Epoch == e {
						if !o.Agreed {
							b.Errorf("epoch %d not agreed: %+v", e, o)
						}
						return
					}
				}
			}()
		}
		wg.Wait()
		return time.Since(start)
	}
	round(0) // warm up: the leader's watcher and the connections
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := uint64(i + 1)
		b.StopTimer()
		if _, err := leader.Apply(&api.Command{Kind: api.CmdEpoch, Job: "bench",
			New: &api.Epoch{Epoch: e, StartStep: 1, GlobalPlanHash: ir.Hash{byte(e), 1}, Expected: expected(e), Reason: "bench"}}, 5*time.Second); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		lat = append(lat, round(e))
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}
