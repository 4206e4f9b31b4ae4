package coord

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/coord/api/apitest"
	"github.com/tmmu/tmmu/internal/scenario"
	"github.com/tmmu/tmmu/ir"
	"github.com/tmmu/tmmu/rendezvous"
	"github.com/tmmu/tmmu/transport"
)

// TestLeaderScenarios drives the leader's decisions (decide.go) through
// the scenarios in testdata: a job built by committed commands, then the
// reports and rendezvous views the leader sees, and what it decides. Go
// test ./coord -run TestLeaderScenarios -rewrite rewrites the expected
// output.
//
//	submit world=N [tp=T] [elastic]        job "j", epoch 0 planned
//	agree epoch=E [holders=a,b]             commit epoch E's agreed outcome
//	epoch start=S [members=a,b] [restore=K] [rollback]   commit the next epoch
//	checkpoint step=S                       commit a checkpoint of step S
//	report id=I rank=R epoch=E step=S       a step report: forged ones, then the progress decision (committed when due)
//	tick                                    the progress decision without a report
//	rendezvous at=T ranks=a,!b,c            the rendezvous at T s (!: no lease): the ranks absent, since when
//	resize at=T [after=A]                   the elastic decision at T s (after: shrink delay, default 10 s), committed as the next epoch, agreed
func TestLeaderScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var s api.State
		var book *stepBook
		var present []rendezvous.Member
		var absent []api.Absent
		apply := func(c *api.Command) string {
			if r := s.Apply(c); r.Err != nil {
				return scenario.Errorf("%v", r.Err)
			}
			return ""
		}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			c := scenario.Of(d)
			j := s.Jobs["j"]
			switch c.Name {
			case "submit":
				world, tp := c.Uint("world", 1), c.Uint("tp", 1)
				spec := &api.JobSpec{Name: "j", Elastic: c.Has("elastic"), ShardSpec: apitest.World(world, tp)}
				book, present, absent = newStepBook(), nil, nil
				if msg := apply(&api.Command{Kind: api.CmdSubmit, Job: "j", Spec: spec, New: apitest.Planned(0, 1, world)}); msg != "" {
					return msg
				}
				return apitest.Describe(s.Jobs["j"])
			case "agree":
				o := &api.Outcome{Agreed: true}
				if h, ok := c.Arg("holders"); ok {
					o.Holders = strings.Split(h, ",")
				}
				if msg := apply(&api.Command{Kind: api.CmdOutcome, Job: "j", Epoch: c.Uint("epoch", 0), Outcome: o}); msg != "" {
					return msg
				}
				return apitest.Describe(s.Jobs["j"])
			case "epoch":
				spec, _ := j.World(j.Current().Epoch)
				e := apitest.Planned(uint64(len(j.Epochs)), c.Uint("start", 1), spec.WorldSize)
				if m, ok := c.Arg("members"); ok {
					members := strings.Split(m, ",")
					next := apitest.World(uint64(len(members)), spec.TensorParallel.Degree)
					e = apitest.Planned(e.Epoch, e.StartStep, next.WorldSize)
					e.ShardSpec, e.Members = &next, members
				}
				if _, ok := c.Arg("restore"); ok {
					e.Restore = &api.Restore{Step: c.Uint("restore", 0), Rollback: c.Has("rollback")}
				}
				if msg := apply(&api.Command{Kind: api.CmdEpoch, Job: "j", New: e}); msg != "" {
					return msg
				}
				return apitest.Describe(s.Jobs["j"])
			case "checkpoint":
				step := c.Uint("step", 0)
				e := j.EpochFor(step)
				k := &api.Checkpoint{Step: step, Epoch: e.Epoch, World: j.WorldSize(e.Epoch)}
				for r := range k.World {
					k.Shards = append(k.Shards, api.CheckpointShard{Rank: r, Digest: ir.Hash{byte(step), byte(r)}})
				}
				if msg := apply(&api.Command{Kind: api.CmdCheckpoint, Job: "j", Checkpoint: k}); msg != "" {
					return msg
				}
				return apitest.Describe(s.Jobs["j"])
			case "report", "tick":
				var got *transport.StepDone
				if c.Name == "report" {
					got = &transport.StepDone{Job: "j", Identity: c.Args["id"], Rank: c.Uint("rank", 0), Epoch: c.Uint("epoch", 0), Step: c.Uint("step", 0)}
					// loss=S:L,S:L… are the losses of the rank's last
					// steps, val=S:L its latest validation.
					parse := func(x string) transport.StepLoss {
						var l transport.StepLoss
						fmt.Sscanf(x, "%d:%g", &l.Step, &l.Loss)
						return l
					}
					if ls, ok := c.Arg("loss"); ok {
						for _, x := range strings.Split(ls, ",") {
							got.Losses = append(got.Losses, parse(x))
						}
					}
					if v, ok := c.Arg("val"); ok {
						l := parse(v)
						got.Val = &l
					}
				}
				var out strings.Builder
				for _, f := range book.take(j, got) {
					fmt.Fprintf(&out, "forged: %s for rank %d under epoch %d\n", f.Identity, f.Rank, f.Epoch)
				}
				if n := len(book.undecided); n > 0 {
					fmt.Fprintf(&out, "undecided: %d\n", n)
				}
				low, ok := book.low(j)
				if !ok {
					fmt.Fprintf(&out, "hold: every rank has finished step %d, committed %d", low, j.LastStep)
					return out.String()
				}
				loss, val := book.losses(j, low)
				if msg := apply(&api.Command{Kind: api.CmdProgress, Job: "j", Step: low, Epoch: j.Timeline(), Loss: loss, Val: val}); msg != "" {
					return out.String() + msg
				}
				fmt.Fprintf(&out, "commit progress %d", low)
				if loss != nil {
					fmt.Fprintf(&out, ", loss %g", loss.Loss)
				}
				if val != nil {
					fmt.Fprintf(&out, ", validation of step %d %g", val.Step, val.Loss)
				}
				return out.String()
			case "rendezvous":
				present = nil
				for r, id := range strings.Split(c.Args["ranks"], ",") {
					m := rendezvous.Member{Rank: uint64(r), Identity: strings.TrimPrefix(id, "!"), Present: !strings.HasPrefix(id, "!")}
					present = append(present, m)
				}
				absent = absentNow(absent, present, at(c))
				var out []string
				for _, x := range absent {
					out = append(out, fmt.Sprintf("rank %d (%s) absent since %ds", x.Rank, x.Identity, x.Since.Unix()))
				}
				if out == nil {
					return "every rank holds its lease"
				}
				return strings.Join(out, "\n")
			case "resize":
				r, err := planResize(j, present, absent, at(c), time.Duration(c.Uint("after", 10))*time.Second)
				switch {
				case err != nil:
					return scenario.Errorf("%v", err)
				case r == nil:
					return "keep the world"
				}
				e := apitest.Planned(uint64(len(j.Epochs)), r.boundary, r.spec.WorldSize)
				e.ShardSpec, e.Members, e.Restore, e.Reason = &r.spec, r.members, r.restore, r.reason
				out := fmt.Sprintf("resize from step %d: world %d (dp %d × tp %d), restore %+v\nreason: %s",
					r.boundary, r.spec.WorldSize, r.spec.DataParallel.Degree, r.spec.TensorParallel.Degree, *r.restore, r.reason)
				if msg := apply(&api.Command{Kind: api.CmdEpoch, Job: "j", New: e}); msg != "" {
					return out + "\n" + msg
				}
				if msg := apply(&api.Command{Kind: api.CmdOutcome, Job: "j", Epoch: e.Epoch, Outcome: &api.Outcome{Agreed: true}}); msg != "" {
					return out + "\n" + msg
				}
				return out + "\n" + apitest.Describe(s.Jobs["j"])
			}
			return scenario.Errorf("unknown command %q", c.Name)
		})
	})
}

// at is the scenario's clock: at=T seconds after the epoch.
func at(c *scenario.Cmd) time.Time { return time.Unix(int64(c.Uint("at", 0)), 0) }
