package replan

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/tmmu/tmmu/internal/scenario"
	"github.com/tmmu/tmmu/ir"
)

// TestScenarios runs the datadriven scenarios in testdata (go test
// ./replan -rewrite regenerates the expected output).
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var r *Replanner
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			c := scenario.Of(d)
			if c.Name != "init" && r == nil {
				return scenario.Errorf("init first")
			}
			switch c.Name {
			case "init":
				cfg, e, err := parseInit(c)
				if err != nil {
					return scenario.Errorf("%v", err)
				}
				r = New(cfg, e)
				return describeEpoch("current", r.Current())
			case "observe":
				o := Observation{Rank: u64(c, "rank"), Step: u64(c, "step"), Dims: map[string]uint64{}}
				for k, v := range c.Args {
					if k != "rank" && k != "step" {
						o.Dims[k] = mustU64(v)
					}
				}
				return string(r.Observe(o))
			case "request":
				q := Request{ID: c.Args["id"], Step: u64(c, "step"), Reason: strings.ReplaceAll(c.Args["reason"], "_", " "), Strategy: c.Args["strategy"]}
				if a, ok := c.Arg("arena"); ok {
					h := ir.Hash{byte(mustU64(a))}
					q.ArenaConfigHash = &h
				}
				if env, ok := c.Arg("env"); ok {
					q.Envelope = parseEnv(env)
				}
				return string(r.Request(q))
			case "membership":
				return string(r.ChangeMembership(Membership{Step: u64(c, "step"), World: u64(c, "world"), Reason: strings.ReplaceAll(c.Args["reason"], "_", " ")}))
			case "decide":
				return describe(r.Decide(u64(c, "step")))
			case "applied":
				r.Applied()
				return describeEpoch("current", r.Current())
			case "cancel":
				r.Cancel()
				return describeEpoch("current", r.Current())
			case "remember":
				r.Remember(r.Current(), ir.Hash{byte(mustU64(c.Args["plan"]))})
				return fmt.Sprintf("plan %02x… remembered for epoch %d", byte(mustU64(c.Args["plan"])), r.Current().Epoch)
			}
			return scenario.Errorf("unknown command %q", c.Name)
		})
	})
}

func u64(c *scenario.Cmd, k string) uint64 { return mustU64(c.Args[k]) }

func mustU64(s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("not a number: %q", s))
	}
	return v
}

// parseEnv reads seq:1:512,batch:1:8.
func parseEnv(s string) Envelope {
	e := Envelope{}
	for _, part := range strings.Split(s, ",") {
		f := strings.Split(part, ":")
		e[f[0]] = ir.DimRange{Min: mustU64(f[1]), Max: mustU64(f[2])}
	}
	return e
}

func parseInit(c *scenario.Cmd) (Config, Epoch, error) {
	cfg := Config{Policy: Policy(c.Args["policy"]), Buckets: map[string][]uint64{}, Limit: map[string]uint64{}, Elastic: slices.Contains(c.Pos, "elastic")}
	if b, ok := c.Arg("buckets"); ok { // seq:512:1024:2048
		for _, dim := range strings.Split(b, ",") {
			f := strings.Split(dim, ":")
			for _, v := range f[1:] {
				cfg.Buckets[f[0]] = append(cfg.Buckets[f[0]], mustU64(v))
			}
		}
	}
	if l, ok := c.Arg("limit"); ok { // seq:4096
		for _, dim := range strings.Split(l, ",") {
			f := strings.Split(dim, ":")
			cfg.Limit[f[0]] = mustU64(f[1])
		}
	}
	e := Epoch{Envelope: parseEnv(c.Args["env"]), World: u64(c, "world"), Mode: "train_full", Strategy: "packed", StartStep: 1}
	return cfg, e, nil
}

func describeEpoch(label string, e Epoch) string {
	return fmt.Sprintf("%s: epoch %d from step %d, %s, world %d, strategy %s, arena %02x…", label, e.Epoch, e.StartStep, e.Envelope, e.World, e.Strategy, e.ArenaConfigHash[0])
}

func describe(d Decision) string {
	var b strings.Builder
	switch d.Kind {
	case Replan:
		fmt.Fprintf(&b, "replan: %s", describeEpoch("next", d.Next))
		if d.Cached {
			fmt.Fprintf(&b, "\ncached: plan %02x…", d.Plan[0])
		}
	default:
		b.WriteString(string(d.Kind))
	}
	for _, r := range d.Reasons {
		b.WriteString("\n  " + r)
	}
	return b.String()
}

// TestDecisionIgnoresArrivalOrder: the same events, shuffled and
// duplicated, give the same decision.
func TestDecisionIgnoresArrivalOrder(t *testing.T) {
	cur := Epoch{Envelope: Envelope{"seq": {Min: 1, Max: 512}, "batch": {Min: 1, Max: 8}}, World: 8, StartStep: 1}
	var events []func(*Replanner)
	for rank := range uint64(8) {
		o := Observation{Rank: rank, Step: 40, Dims: map[string]uint64{"seq": 300 + 100*rank, "batch": 4 + rank}}
		events = append(events, func(r *Replanner) { r.Observe(o) })
	}
	for i := range 3 {
		q := Request{ID: fmt.Sprintf("op%d", i), Step: 39, Reason: "resize", Strategy: []string{"slots", "packed", "greedy-size"}[i]}
		events = append(events, func(r *Replanner) { r.Request(q) })
	}
	var want string
	for seed := range uint64(50) {
		r := New(Config{Policy: AtSafepoint, Buckets: map[string][]uint64{"seq": {512, 1024, 2048}}}, cur)
		order := slices.Clone(events)
		rng := rand.New(rand.NewPCG(seed, 1))
		order = append(order, order[rng.IntN(len(order))])
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, ev := range order {
			ev(r)
		}
		got := describe(r.Decide(40))
		if seed == 0 {
			want = got
			t.Logf("decision:\n%s", got)
		} else if got != want {
			t.Fatalf("seed %d: decision\n%s\nwant\n%s", seed, got, want)
		}
	}
}

// TestRetriesOnANewReplanner: a decision names the operator requests it
// answers; a replanner told they were decided (a new leader's, from the
// committed epochs) answers a retry of one as a duplicate, not a request
// to hold or to decide again.
func TestRetriesOnANewReplanner(t *testing.T) {
	cur := Epoch{World: 4, StartStep: 1, Strategy: "packed"}
	r := New(Config{Policy: AtSafepoint}, cur)
	r.Request(Request{ID: "op-b", Step: 5, Reason: "b", Strategy: "slots"})
	r.Request(Request{ID: "op-a", Step: 5, Reason: "a", Strategy: "slots"})
	d := r.Decide(5)
	if d.Kind != Replan || !slices.Equal(d.Requests, []string{"op-a", "op-b"}) {
		t.Fatalf("decision %v answers %v, want a replan answering op-a and op-b", d.Kind, d.Requests)
	}
	fresh := New(Config{Policy: AtSafepoint}, cur)
	fresh.SetPending(d.Next)
	fresh.Seen(d.Requests...)
	if ack := fresh.Request(Request{ID: "op-a", Step: 6, Reason: "a", Strategy: "slots"}); ack != Duplicate {
		t.Fatalf("a retried request on the new replanner: %v, want %v", ack, Duplicate)
	}
	if ack := fresh.Request(Request{ID: "op-c", Step: 6, Reason: "c", Strategy: "greedy-size"}); ack != Held {
		t.Fatalf("a new request while the epoch is pending: %v, want %v", ack, Held)
	}
}
