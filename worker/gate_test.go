package worker

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/tmmu/tmmu/coord/api"
	"github.com/tmmu/tmmu/coord/api/apitest"
	"github.com/tmmu/tmmu/internal/scenario"
)

// TestGateScenarios drives the worker's gate (gate.go) through the
// scenarios in testdata/gate: a job built by committed commands, then
// what the worker knows, and whether it may run a step (go test ./worker
// -run TestGateScenarios -rewrite rewrites the expected output).
//
//	submit world=N steps=S [window=W]      job "j", epoch 0 planned
//	agree epoch=E [failed]                 commit epoch E's outcome
//	epoch start=S                          commit the next epoch
//	progress step=S                        commit progress
//	pause step=S [remove]                  pause at step S (the store is full), or resume
//	gate step=S [standby] [rejoin=R] [over] [announced] [grant=G]
//	    the decision for step S: standby (not a member of the step's
//	    epoch), rejoin (a later epoch takes it back at R), over (its
//	    standby is over), announced (the leader announced the step's
//	    epoch agreed), grant (the furthest step granted)
func TestGateScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/gate", func(t *testing.T, path string) {
		var s api.State
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			c := scenario.Of(d)
			var cmd *api.Command
			switch c.Name {
			case "submit":
				world := c.Uint("world", 1)
				spec := &api.JobSpec{Name: "j", Steps: c.Uint("steps", 0), Window: c.Uint("window", 0), ShardSpec: apitest.World(world, 1)}
				cmd = &api.Command{Kind: api.CmdSubmit, Job: "j", Spec: spec, New: apitest.Planned(0, 1, world)}
			case "agree":
				cmd = &api.Command{Kind: api.CmdOutcome, Job: "j", Epoch: c.Uint("epoch", 0), Outcome: &api.Outcome{Agreed: !c.Has("failed"), Reason: "rank 1's plan hash differs"}}
			case "epoch":
				j := s.Jobs["j"]
				cmd = &api.Command{Kind: api.CmdEpoch, Job: "j", New: apitest.Planned(uint64(len(j.Epochs)), c.Uint("start", 1), j.WorldSize(j.Current().Epoch))}
			case "progress":
				cmd = &api.Command{Kind: api.CmdProgress, Job: "j", Step: c.Uint("step", 0), Epoch: s.Jobs["j"].Timeline()}
			case "pause":
				cmd = &api.Command{Kind: api.CmdPause, Job: "j", Step: c.Uint("step", 0), Reason: "the checkpoint store is full", Remove: c.Has("remove")}
			case "gate":
				j := s.Jobs["j"]
				v := gateView{job: j, step: c.Uint("step", 1), member: !c.Has("standby"), rejoin: c.Uint("rejoin", 0), standbyOver: c.Has("over")}
				if c.Has("announced") {
					v.agreed = &api.Outcome{Agreed: true}
				}
				a, o := admit(v)
				out := a.String()
				if o != nil && o == v.agreed {
					out += " (by the announcement)"
				}
				if a != admitRun {
					return out
				}
				ok, why := mayStep(j, v.step, c.Uint("grant", 0))
				if !ok {
					return out + "; then wait: " + why
				}
				return out + fmt.Sprintf("; then step %d", v.step)
			default:
				return scenario.Errorf("unknown command %q", c.Name)
			}
			if r := s.Apply(cmd); r.Err != nil {
				return scenario.Errorf("%v", r.Err)
			}
			return apitest.Describe(s.Jobs["j"])
		})
	})
}
