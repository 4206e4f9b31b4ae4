package coord_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/tmmu/tmmu/coord/coordtest"

	"github.com/tmmu/tmmu/coord/api"
)

// BenchmarkFailover times leader loss: from shutting the leader down
// without a transfer (a crash, to the others) until a new leader answers
// GET /v1/status naming itself leader. The cluster runs with the Fast
// raft timeouts of loopback clusters (election and heartbeat 300 ms).
func BenchmarkFailover(b *testing.B) {
	c, err := coordtest.StartCluster(b.TempDir(), 3, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	var lat []time.Duration
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		li, err := c.Leader(10 * time.Second)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := c.Stop(li); err != nil {
			b.Fatal(err)
		}
		for {
			served := false
			for j, n := range c.Nodes {
				if n == nil || !n.IsLeader() {
					continue
				}
				st, err := api.NewClient(c.URLs()[j]).Status(ctx)
				served = err == nil && st.Leader == st.ID
			}
			if served {
				break
			}
			time.Sleep(time.Millisecond)
		}
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if err := c.Start(li); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "max-ms")
}
