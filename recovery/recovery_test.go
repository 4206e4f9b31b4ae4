package recovery

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/tmmu/tmmu/internal/scenario"
	"github.com/tmmu/tmmu/ir"
)

// TestScenarios runs the datadriven scenarios in testdata (go test
// ./recovery -rewrite regenerates the expected output). A scenario builds
// a job as committed (epoch, checkpoint, progress, final, paused), a
// worker's holding (hold, wrote) and asks the decisions:
//
//	prepare step=S                  how the worker gets the state step S needs
//	decide kind=K rank=R epoch=E step=S [identity=I] [detail=D]
//	report step=S epoch=E rank=R    a checkpoint report for the tally
//	garbage objects=S:R:D,... kept=S:D|D,...
//	due k=K every=N last=L
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var j Job
		var h Holding
		var tally Tally
		wrote := map[uint64]bool{}
		started := map[uint64]bool{} // epochs this rank reported a step under
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			c := scenario.Of(d)
			switch c.Name {
			case "reset":
				j, h, tally, wrote, started = Job{}, Holding{}, Tally{}, map[uint64]bool{}, map[uint64]bool{}
				return "ok"
			case "epoch":
				e := Epoch{Epoch: uint64(len(j.Epochs)), StartStep: u64(c, "start"), World: u64(c, "world"), Agreed: has(c, "agreed")}
				if r, ok := c.Arg("restore"); ok {
					e.Restore = &Restore{Step: mustU64(r), Rollback: has(c, "rollback")}
					if e.Restore.Rollback {
						j.LastStep = e.Restore.Step
						j.Checkpoints = slices.DeleteFunc(j.Checkpoints, func(m Manifest) bool { return m.Step > e.Restore.Step })
					}
				}
				j.Epochs = append(j.Epochs, e)
				return describeJob(&j)
			case "agreed":
				j.Epochs[len(j.Epochs)-1].Agreed = true
				return describeJob(&j)
			case "checkpoint":
				j.Checkpoints = append(j.Checkpoints, Manifest{Step: u64(c, "step"), Epoch: u64(c, "epoch"), World: u64(c, "world")})
				return describeJob(&j)
			case "drop":
				j.Checkpoints = slices.DeleteFunc(j.Checkpoints, func(m Manifest) bool { return m.Step == u64(c, "step") })
				return describeJob(&j)
			case "progress":
				j.LastStep = u64(c, "step")
				return describeJob(&j)
			case "final":
				j.Final = true
				return "final"
			case "paused":
				j.Paused = true
				return "paused"
			case "hold":
				if _, ok := c.Arg("none"); ok || len(c.Args) == 0 {
					h = Holding{Stateless: has(c, "stateless")}
				} else {
					h = Holding{Valid: true, Step: u64(c, "step"), Epoch: u64(c, "epoch"), Stateless: has(c, "stateless")}
				}
				return "ok"
			case "wrote":
				wrote[u64(c, "step")] = true
				return "ok"
			case "started":
				started[u64(c, "epoch")] = true
				return "ok"
			case "prepare":
				s := u64(c, "step")
				e := j.EpochFor(s)
				a := Prepare(s, *e, h, started[e.Epoch], func(step uint64) bool { _, ok := j.Checkpoint(step); return ok }, func(step uint64) bool { return wrote[step] })
				return fmt.Sprintf("epoch %d: %s", e.Epoch, a)
			case "decide":
				q := Request{Kind: RequestKind(c.Args["kind"]), Rank: u64(c, "rank"), Identity: c.Args["identity"], Epoch: u64(c, "epoch"), Step: u64(c, "step"),
					Detail: strings.ReplaceAll(c.Args["detail"], "_", " ")}
				d := Decide(j, q)
				out := string(d.Kind)
				if d.Kind == Rollback {
					out += fmt.Sprintf(" to=%d", d.To)
					if d.Drop != nil {
						out += fmt.Sprintf(" drop=%d", d.Drop.Step)
					}
				}
				return out + ": " + d.Reason
			case "report":
				r := Report{Step: u64(c, "step"), Epoch: u64(c, "epoch"), Rank: u64(c, "rank")}
				done, ok := tally.Add(&j, r)
				if !ok {
					return "pending: " + strings.Join(tally.Pending(), "; ")
				}
				var ranks []string
				for _, r := range done {
					ranks = append(ranks, strconv.FormatUint(r.Rank, 10))
				}
				return fmt.Sprintf("complete: step %d epoch %d ranks %s", r.Step, r.Epoch, strings.Join(ranks, ","))
			case "garbage":
				var objs []Object
				for _, o := range strings.Split(c.Args["objects"], ",") {
					f := strings.Split(o, ":")
					objs = append(objs, Object{Name: o, Step: mustU64(f[0]), Rank: mustU64(f[1]), Digest: ir.Hash{byte(mustU64(f[2]))}})
				}
				var kept []Kept
				if k := c.Args["kept"]; k != "" {
					for _, m := range strings.Split(k, ",") {
						step, ds, _ := strings.Cut(m, ":")
						kk := Kept{Step: mustU64(step)}
						for _, d := range strings.Split(ds, "|") {
							kk.Digests = append(kk.Digests, ir.Hash{byte(mustU64(d))})
						}
						kept = append(kept, kk)
					}
				}
				g := Garbage(objs, kept)
				if len(g) == 0 {
					return "nothing"
				}
				return strings.Join(g, " ")
			case "due":
				var out []string
				for k := u64(c, "from"); k <= u64(c, "to"); k++ {
					if Due(k, u64(c, "every"), u64(c, "last")) {
						out = append(out, strconv.FormatUint(k, 10))
					}
				}
				return "due at " + strings.Join(out, " ")
			}
			return scenario.Errorf("unknown command %q", c.Name)
		})
	})
}

func describeJob(j *Job) string {
	var b strings.Builder
	for _, e := range j.Epochs {
		fmt.Fprintf(&b, "epoch %d from step %d, world %d", e.Epoch, e.StartStep, e.World)
		if e.Restore != nil {
			kind := "restores"
			if e.Restore.Rollback {
				kind = "rolls back to"
			}
			fmt.Fprintf(&b, ", %s step %d", kind, e.Restore.Step)
		}
		if !e.Agreed {
			b.WriteString(", agreeing")
		}
		b.WriteString("\n")
	}
	var cs []string
	for _, m := range j.Checkpoints {
		cs = append(cs, fmt.Sprintf("%d@%d", m.Step, m.Epoch))
	}
	fmt.Fprintf(&b, "progress %d; checkpoints [%s]", j.LastStep, strings.Join(cs, " "))
	return b.String()
}

func has(c *scenario.Cmd, k string) bool {
	if _, ok := c.Args[k]; ok {
		return true
	}
	return slices.Contains(c.Pos, k)
}

func u64(c *scenario.Cmd, k string) uint64 { return mustU64(c.Args[k]) }

func mustU64(s string) uint64 {
	if s == "" {
		return 0
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("not a number: %q", s))
	}
	return v
}

// TestPrepareNeverRunsWithoutState: over every combination of holding
// and epoch shape, Prepare says Ready only when the epoch's executor holds
// exactly the state the step needs, and never sends a stateful worker
// that holds nothing to run.
func TestPrepareNeverRunsWithoutState(t *testing.T) {
	for _, restore := range []*Restore{nil, {Step: 0, Rollback: true}, {Step: 30, Rollback: true}, {Step: 39}} {
		for _, start := range []uint64{1, 31, 40} {
			if restore != nil && start != restore.Step+1 {
				continue
			}
			e := Epoch{Epoch: 2, StartStep: start, World: 4, Agreed: true, Restore: restore}
			for _, h := range []Holding{{}, {Valid: true, Step: 38, Epoch: 1}, {Valid: true, Step: 39, Epoch: 1}, {Valid: true, Step: 39, Epoch: 2}, {Valid: true, Step: 30, Epoch: 1}} {
				for s := start; s <= 41; s++ {
					for _, committed := range []bool{false, true} {
						a := Prepare(s, e, h, false, func(uint64) bool { return committed }, func(uint64) bool { return false })
						switch a.Kind {
						case Ready:
							if !h.Valid || h.Step != s-1 || h.Epoch != e.Epoch {
								t.Errorf("step %d, epoch %+v, holding %+v: ready", s, e, h)
							}
						case Carry:
							if !h.Valid || h.Step != s-1 || restore != nil {
								t.Errorf("step %d, epoch %+v, holding %+v: carry", s, e, h)
							}
						case Init:
							if s != 1 && (restore == nil || restore.Step != 0 || s != start) {
								t.Errorf("step %d, epoch %+v, holding %+v: init", s, e, h)
							}
						case Load:
							if restore == nil || s != start || !committed {
								t.Errorf("step %d, epoch %+v, holding %+v: load", s, e, h)
							}
						case Rewind:
							if restore == nil || s <= start || a.Step+1 != start {
								t.Errorf("step %d, epoch %+v, holding %+v: rewind to %d", s, e, h, a.Step+1)
							}
						}
					}
				}
			}
		}
	}
}
