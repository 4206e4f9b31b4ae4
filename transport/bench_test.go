package transport

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkAgreementRound measures one plan-agreement round against an
// embedded nats-server (file storage, the default): for a fresh epoch, N
// rank goroutines, each on its own connection, Report their plan hash
// while the leader's WatchReports feeds a Tally until it is Done. The
// clock runs from the moment the ranks are released until the tally is
// done, so a round includes creating the leader's watch (which races with
// the reports, as it does in the protocol) and stopping it. Between rounds,
// outside the timer, the epoch is forgotten, so every round starts from
// the same bucket state and the work per iteration stays bounded.
//
// Besides ns/op it reports the median and 99th-percentile round latency.
func BenchmarkAgreementRound(b *testing.B) {
	for _, world := range []int{8, 64} {
		b.Run(fmt.Sprintf("ranks=%d", world), func(b *testing.B) { benchAgreementRound(b, world) })
	}
}

func benchAgreementRound(b *testing.B, world int) {
	const job = "bench"
	s := startServer(b)
	leader, _ := newTransport(b, s)
	workers := make([]*Transport, world)
	for r := range workers {
		workers[r], _ = newTransport(b, s)
	}
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	errs := make(chan error, world)

	b.ResetTimer()
	for i := range b.N {
		epoch := uint64(i + 1)
		exp := planHashes(job, epoch, world)
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		start := time.Now()
		var wg sync.WaitGroup
		for r := range world {
			wg.Go(func() {
				if err := workers[r].Report(rctx, report(job, epoch, uint64(r), exp[r])); err != nil {
					errs <- err
				}
			})
		}
		ch, err := leader.WatchReports(rctx, job, epoch)
		if err != nil {
			b.Fatal(err)
		}
		tally := NewTally(job, epoch, exp)
		for !tally.Done() {
			rep, ok := <-ch
			if !ok {
				b.Fatalf("epoch %d: watch closed with %d of %d reports", epoch, tally.Reported(), world)
			}
			tally.Add(rep)
		}
		lat = append(lat, time.Since(start))
		wg.Wait() // the ranks may see their acks after the leader saw the values
		cancel()
		for range ch {
		}
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		if o := tally.Outcome(); !o.Agreed {
			b.Fatalf("epoch %d: %+v", epoch, o)
		}

		b.StopTimer()
		if err := leader.Forget(ctx, job, epoch); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()

	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 99)), "p99-ms")
}

// percentile returns the nearest-rank p-th percentile of sorted xs.
func percentile(xs []time.Duration, p int) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	i := (len(xs)*p + 99) / 100 // ceil(len*p/100), 1-based
	return xs[max(i, 1)-1]
}
