package transport

import (
	"math/rand/v2"
	"reflect"
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
		name: "a second identity for a rank: the first stands",
		steps: append(accept(all()...),
			step{PlanReport{Job: job, Epoch: epoch, Rank: 0, Identity: "other", PlanHash: exp[0]}, Duplicate}),
		done: true,
		want: Outcome{Job: job, Epoch: epoch, Agreed: true},
	}, {
		name: "one identity speaks for one rank",
		steps: []step{{rep(0, exp[0]), Accepted},
			{PlanReport{Job: job, Epoch: epoch, Rank: 1, Identity: "worker-0", PlanHash: exp[1]}, IdentityTaken},
			{PlanReport{Job: job, Epoch: epoch, Rank: 2, Identity: "worker-0", PlanHash: exp[2]}, IdentityTaken},
			{rep(0, exp[0]), Duplicate}},
		want: Outcome{Job: job, Epoch: epoch, Missing: []uint64{1, 2, 3}, Reason: "3 of 4 ranks did not report"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tl := NewTally(job, epoch, exp)
			tc.want.Holders = make([]string, len(exp))
			for i, s := range tc.steps {
				if got := tl.Add(s.r); got != s.want {
					t.Fatalf("step %d: Add(rank %d epoch %d) = %v, want %v", i, s.r.Rank, s.r.Epoch, got, s.want)
				}
				if s.want == Accepted {
					tc.want.Holders[s.r.Rank] = s.r.Identity
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

func TestAddResultString(t *testing.T) {
	for a, want := range map[AddResult]string{
		Accepted: "accepted", Duplicate: "duplicate", Conflicting: "conflicting", OtherEpoch: "other-epoch",
		BadRank: "bad-rank", Invalid: "invalid", 0: "AddResult(0)", 200: "AddResult(200)",
	} {
		if got := a.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", a, got, want)
		}
	}
}
