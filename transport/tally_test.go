package transport

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/ir"
)

func TestTally(t *testing.T) {
	const job, epoch = "job", 7
	exp := planHashes(job, epoch, 4)
	bad := hashOf("bad plan")
	rep := func(rank uint64, h ir.Hash) PlanReport { return report(job, epoch, rank, h) }
	all := func() []PlanReport {
		return []PlanReport{rep(0, exp[0]), rep(1, exp[1]), rep(2, exp[2]), rep(3, exp[3])}
	}
	type step struct {
		r    PlanReport
		want AddResult
	}
	accept := func(rs ...PlanReport) []step {
		out := make([]step, len(rs))
		for i, r := range rs {
			out[i] = step{r, Accepted}
		}
		return out
	}
	tests := []struct {
		name  string
		steps []step
		done  bool
		want  Outcome
	}{{
		name:  "all agree",
		steps: accept(all()...),
		done:  true,
		want:  Outcome{Job: job, Epoch: epoch, Agreed: true},
	}, {
		name:  "reordered",
		steps: accept(rep(3, exp[3]), rep(1, exp[1]), rep(0, exp[0]), rep(2, exp[2])),
		done:  true,
		want:  Outcome{Job: job, Epoch: epoch, Agreed: true},
	}, {
		name:  "one mismatch",
		steps: accept(rep(0, exp[0]), rep(1, exp[1]), rep(2, bad), rep(3, exp[3])),
		done:  true,
		want: Outcome{Job: job, Epoch: epoch, Mismatches: []Mismatch{{Rank: 2, Expected: exp[2], Got: bad}},
			Reason: "1 of 4 ranks reported an unexpected plan hash"},
	}, {
		name: "duplicates ignored",
		steps: append(accept(all()...),
			step{rep(1, exp[1]), Duplicate}, step{rep(3, exp[3]), Duplicate}, step{rep(1, exp[1]), Duplicate}),
		done: true,
		want: Outcome{Job: job, Epoch: epoch, Agreed: true},
	}, {
		name: "late, early and foreign reports ignored",
		steps: []step{
			{report(job, epoch-1, 0, bad), OtherEpoch},
			{report(job, epoch+1, 1, bad), OtherEpoch},
			{report("job2", epoch, 2, exp[2]), OtherEpoch},
			{rep(0, exp[0]), Accepted}, {rep(1, exp[1]), Accepted},
			{report(job, epoch-1, 2, exp[2]), OtherEpoch},
			{rep(2, exp[2]), Accepted}, {rep(3, exp[3]), Accepted},
		},
		done: true,
		want: Outcome{Job: job, Epoch: epoch, Agreed: true},
	}, {
		name:  "bad rank and invalid ignored",
		steps: append([]step{{rep(4, exp[0]), BadRank}, {rep(1<<40, exp[0]), BadRank}, {rep(0, ir.Hash{}), Invalid}}, accept(all()...)...),
		done:  true,
		want:  Outcome{Job: job, Epoch: epoch, Agreed: true},
	}, {
		name:  "early outcome has missing ranks",
		steps: accept(rep(2, exp[2]), rep(0, exp[0])),
		want: Outcome{Job: job, Epoch: epoch, Missing: []uint64{1, 3},
			Reason: "2 of 4 ranks did not report"},
	}, {
		name:  "nothing reported",
		want:  Outcome{Job: job, Epoch: epoch, Missing: []uint64{0, 1, 2, 3}, Reason: "4 of 4 ranks did not report"},
		steps: nil,
	}, {
		name:  "missing and mismatched",
		steps: accept(rep(3, bad), rep(1, exp[1])),
		want: Outcome{Job: job, Epoch: epoch, Missing: []uint64{0, 2},
			Mismatches: []Mismatch{{Rank: 3, Expected: exp[3], Got: bad}},
			Reason:     "1 of 4 ranks reported an unexpected plan hash; 2 did not report"},
	}, {
		name: "conflicting second report ignored: good first stands",
		steps: append(accept(all()...),
			step{rep(2, bad), Conflicting}),
		done: true,
		want: Outcome{Job: job, Epoch: epoch, Agreed: true},
	}, {
		name: "conflicting second report ignored: bad first stands",
		steps: []step{{rep(0, exp[0]), Accepted}, {rep(1, bad), Accepted}, {rep(1, exp[1]), Conflicting},
			{rep(2, exp[2]), Accepted}, {rep(3, exp[3]), Accepted}, {rep(1, bad), Duplicate}},
		done: true,
		want: Outcome{Job: job, Epoch: epoch, Mismatches: []Mismatch{{Rank: 1, Expected: exp[1], Got: bad}},
			Reason: "1 of 4 ranks reported an unexpected plan hash"},
	}, {
		name: "identity does not matter to the tally",
		steps: append(accept(all()...),
			step{PlanReport{Job: job, Epoch: epoch, Rank: 0, Identity: "other", PlanHash: exp[0]}, Duplicate}),
		done: true,
		want: Outcome{Job: job, Epoch: epoch, Agreed: true},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tl := NewTally(job, epoch, exp)
			for i, s := range tc.steps {
				if got := tl.Add(s.r); got != s.want {
					t.Fatalf("step %d: Add(rank %d epoch %d) = %v, want %v", i, s.r.Rank, s.r.Epoch, got, s.want)
				}
			}
			if tl.Done() != tc.done {
				t.Fatalf("Done() = %v, want %v", tl.Done(), tc.done)
			}
			o := tl.Outcome()
			if !reflect.DeepEqual(o, tc.want) {
				t.Fatalf("Outcome() =\n %+v\nwant\n %+v", o, tc.want)
			}
			if err := o.Validate(); err != nil {
				t.Fatalf("outcome does not validate: %v", err)
			}
		})
	}
}

func TestTallyEdges(t *testing.T) {
	t.Run("empty world", func(t *testing.T) {
		tl := NewTally("job", 1, nil)
		o := tl.Outcome()
		if o.Agreed || o.Reason == "" || !tl.Done() {
			t.Fatalf("empty world: Done %v, outcome %+v", tl.Done(), o)
		}
		if err := o.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := tl.Add(report("job", 1, 0, hashOf("x"))); got != BadRank {
			t.Fatalf("Add = %v", got)
		}
	})
	t.Run("expected slice is copied", func(t *testing.T) {
		exp := planHashes("job", 1, 2)
		tl := NewTally("job", 1, exp)
		want := exp[0]
		exp[0] = hashOf("changed")
		tl.Add(report("job", 1, 0, want))
		tl.Add(report("job", 1, 1, exp[1]))
		if !tl.Outcome().Agreed {
			t.Fatal("caller's slice changed the tally")
		}
	})
	t.Run("outcome is a snapshot", func(t *testing.T) {
		exp := planHashes("job", 1, 3)
		tl := NewTally("job", 1, exp)
		o := tl.Outcome()
		o.Missing[0] = 99
		if tl.Outcome().Missing[0] != 0 {
			t.Fatal("Outcome shares state with the tally")
		}
		if tl.World() != 3 || tl.Reported() != 0 {
			t.Fatalf("World %d Reported %d", tl.World(), tl.Reported())
		}
	})
}

// TestTallyPermutationInvariant: for a set of reports with one hash per
// rank (some wrong, some ranks silent), any permutation of the set with
// random duplicates and noise from other epochs and jobs yields the same
// Outcome, byte for byte once encoded.
func TestTallyPermutationInvariant(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x746d6d75))
		world := 1 + rng.IntN(96)
		const job, epoch = "perm", 11
		exp := planHashes(job, epoch, world)
		var set []PlanReport
		for r := range world {
			switch rng.IntN(8) {
			case 0: // silent
			case 1:
				set = append(set, report(job, epoch, uint64(r), hashOf("wrong %d %d", seed, r)))
			default:
				set = append(set, report(job, epoch, uint64(r), exp[r]))
			}
		}
		var want Outcome
		var wantBytes []byte
		for trial := range 20 {
			msgs := append([]PlanReport(nil), set...)
			for range rng.IntN(2 * world) { // duplicates
				if len(set) > 0 {
					msgs = append(msgs, set[rng.IntN(len(set))])
				}
			}
			for range rng.IntN(world) { // noise
				r := uint64(rng.IntN(world))
				switch rng.IntN(3) {
				case 0:
					msgs = append(msgs, report(job, epoch-1, r, hashOf("old %d", r)))
				case 1:
					msgs = append(msgs, report("other", epoch, r, hashOf("other %d", r)))
				default:
					msgs = append(msgs, report(job, epoch, uint64(world+rng.IntN(4)), exp[0]))
				}
			}
			rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
			tl := NewTally(job, epoch, exp)
			for _, m := range msgs {
				tl.Add(m)
			}
			o := tl.Outcome()
			b, err := Encode(o)
			if err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			if trial == 0 {
				want, wantBytes = o, b
				if tl.Done() != (len(set) == world) {
					t.Fatalf("seed %d: Done %v with %d of %d ranks", seed, tl.Done(), len(set), world)
				}
				continue
			}
			if !reflect.DeepEqual(o, want) || string(b) != string(wantBytes) {
				t.Fatalf("seed %d trial %d: outcome\n %+v\ndiffers from\n %+v", seed, trial, o, want)
			}
		}
	}
}

func TestStepBarrier(t *testing.T) {
	const job, epoch, world = "job", 3, 4
	exp := planHashes(job, epoch, world)
	bad := hashOf("bad")
	sr := func(rank, step uint64, h ir.Hash) StepReport {
		return StepReport{Job: job, Epoch: epoch, Rank: rank, Step: step, PlanHash: h}
	}

	t.Run("ready when all ranks report the expected hash", func(t *testing.T) {
		b := NewStepBarrier(job, epoch, world, exp)
		for _, r := range []uint64{3, 0, 2} {
			if got := b.Add(sr(r, 10, exp[r])); got != Accepted {
				t.Fatalf("Add = %v", got)
			}
			if b.Ready(10) {
				t.Fatal("ready too early")
			}
		}
		if m := b.Missing(10); !reflect.DeepEqual(m, []uint64{1}) {
			t.Fatalf("Missing = %v", m)
		}
		// Rank 1 is already at step 11; step 10 still waits for it.
		b.Add(sr(1, 11, exp[1]))
		if b.Ready(10) || b.Ready(11) {
			t.Fatal("ready without rank 1")
		}
		b.Add(sr(1, 10, exp[1]))
		if !b.Ready(10) || b.Ready(11) {
			t.Fatalf("Ready(10) %v Ready(11) %v", b.Ready(10), b.Ready(11))
		}
		if b.Missing(10) != nil || b.Mismatches(10) != nil {
			t.Fatal("ready step has missing or mismatched ranks")
		}
		if b.Pending() != 2 {
			t.Fatalf("Pending = %d", b.Pending())
		}
	})
	t.Run("mismatch blocks the step", func(t *testing.T) {
		b := NewStepBarrier(job, epoch, world, exp)
		for r := range uint64(world) {
			h := exp[r]
			if r == 2 {
				h = bad
			}
			b.Add(sr(r, 5, h))
		}
		if b.Ready(5) {
			t.Fatal("ready with a mismatched rank")
		}
		want := []Mismatch{{Rank: 2, Expected: exp[2], Got: bad}}
		if m := b.Mismatches(5); !reflect.DeepEqual(m, want) {
			t.Fatalf("Mismatches = %v", m)
		}
		// A corrected second report does not replace the first.
		if got := b.Add(sr(2, 5, exp[2])); got != Conflicting {
			t.Fatalf("Add = %v, want Conflicting", got)
		}
		if b.Ready(5) {
			t.Fatal("conflicting report made the step ready")
		}
	})
	t.Run("ignored reports", func(t *testing.T) {
		b := NewStepBarrier(job, epoch, world, exp)
		cases := []struct {
			r    StepReport
			want AddResult
		}{
			{sr(0, 1, exp[0]), Accepted},
			{sr(0, 1, exp[0]), Duplicate},
			{sr(0, 1, bad), Conflicting},
			{StepReport{Job: job, Epoch: epoch - 1, Rank: 1, Step: 1, PlanHash: exp[1]}, OtherEpoch},
			{StepReport{Job: "other", Epoch: epoch, Rank: 1, Step: 1, PlanHash: exp[1]}, OtherEpoch},
			{sr(world, 1, exp[0]), BadRank},
			{sr(1, 1, ir.Hash{}), Invalid},
		}
		for i, c := range cases {
			if got := b.Add(c.r); got != c.want {
				t.Fatalf("case %d: Add = %v, want %v", i, got, c.want)
			}
		}
		if b.Pending() != 1 || !reflect.DeepEqual(b.Missing(1), []uint64{1, 2, 3}) {
			t.Fatalf("Pending %d Missing %v", b.Pending(), b.Missing(1))
		}
	})
	t.Run("forget bounds memory", func(t *testing.T) {
		b := NewStepBarrier(job, epoch, world, exp)
		for s := range uint64(10) {
			for r := range uint64(world) {
				b.Add(sr(r, s, exp[r]))
			}
		}
		b.Forget(6)
		if b.Pending() != 3 || b.Ready(6) || !b.Ready(7) {
			t.Fatalf("after Forget(6): Pending %d Ready(6) %v Ready(7) %v", b.Pending(), b.Ready(6), b.Ready(7))
		}
		if got := b.Add(sr(0, 3, exp[0])); got != OutOfWindow {
			t.Fatalf("late report for a forgotten step: %v", got)
		}
		if b.Missing(3) != nil {
			t.Fatal("Missing of a forgotten step")
		}
		b.Forget(2) // earlier than the watermark: no-op
		if b.Pending() != 3 {
			t.Fatal("Forget(2) changed the barrier")
		}
		b.Forget(^uint64(0))
		if b.Pending() != 0 || b.Add(sr(0, ^uint64(0), exp[0])) != OutOfWindow {
			t.Fatal("Forget(MaxUint64) did not forget everything")
		}
	})
	t.Run("pending steps are capped", func(t *testing.T) {
		b := NewStepBarrier(job, epoch, world, exp)
		for s := range uint64(MaxPendingSteps) {
			if got := b.Add(sr(0, 1000+s, exp[0])); got != Accepted {
				t.Fatalf("step %d: %v", s, got)
			}
		}
		if got := b.Add(sr(0, 1000+MaxPendingSteps, exp[0])); got != OutOfWindow {
			t.Fatalf("step past the cap: %v", got)
		}
		if got := b.Add(sr(1, 1000, exp[1])); got != Accepted { // tracked steps still fill
			t.Fatalf("tracked step: %v", got)
		}
		b.Forget(1000)
		if got := b.Add(sr(0, 1000+MaxPendingSteps, exp[0])); got != Accepted {
			t.Fatalf("after Forget: %v", got)
		}
	})
	t.Run("empty world never ready", func(t *testing.T) {
		b := NewStepBarrier(job, epoch, 0, nil)
		if b.Ready(0) {
			t.Fatal("ready")
		}
	})
	t.Run("wrong expected length panics", func(t *testing.T) {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "expected hashes") {
				t.Fatalf("recover() = %v", r)
			}
		}()
		NewStepBarrier(job, epoch, world+1, exp)
	})
	t.Run("order does not matter", func(t *testing.T) {
		for seed := uint64(1); seed <= 20; seed++ {
			rng := rand.New(rand.NewPCG(seed, 7))
			var msgs []StepReport
			for s := uint64(0); s < 5; s++ {
				for r := range uint64(world) {
					if s == 3 && r == 1 {
						continue // rank 1 never reports step 3
					}
					msgs = append(msgs, sr(r, s, exp[r]), sr(r, s, exp[r]))
				}
			}
			rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
			b := NewStepBarrier(job, epoch, world, exp)
			for _, m := range msgs {
				b.Add(m)
			}
			for s := uint64(0); s < 5; s++ {
				if b.Ready(s) != (s != 3) {
					t.Fatalf("seed %d: Ready(%d) = %v", seed, s, b.Ready(s))
				}
			}
		}
	})
}

func TestAddResultString(t *testing.T) {
	for a, want := range map[AddResult]string{
		Accepted: "accepted", Duplicate: "duplicate", Conflicting: "conflicting", OtherEpoch: "other-epoch",
		BadRank: "bad-rank", Invalid: "invalid", OutOfWindow: "out-of-window", 0: "AddResult(0)", 200: "AddResult(200)",
	} {
		if got := a.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", a, got, want)
		}
	}
}
