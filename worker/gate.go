package worker

import (
	"fmt"

	"github.com/tmmu/tmmu/coord/api"
)

// The worker's gate: whether a step may run, decided from the job as
// fetched and what this worker knows of its own, apart from the loop
// (await, ready) that fetches, plans, restores state and reports. Both
// decisions are pure; the scenarios in testdata/gate drive them.

// gateView is what the worker knows when it decides about a step.
type gateView struct {
	job  *api.Job
	step uint64
	// member: this worker is a rank of the step's epoch; rejoin, when
	// it is not, is the first step of a later epoch that takes it back
	// (0: none); standbyOver: it may not wait as a standby any longer.
	member      bool
	rejoin      uint64
	standbyOver bool
	// agreed is the epoch's outcome as the leader announced it (signed),
	// before a fetch shows it committed; nil when none was.
	agreed *api.Outcome
}

// admission is the gate's first answer.
type admission int

const (
	admitWait      admission = iota // nothing to do until something changes
	admitRun                        // agreed: hold the step's state, then ask mayStep
	admitRejoin                     // skip to the epoch that takes this worker back
	admitNotMember                  // left out of the world for good
	admitNotAgreed                  // the epoch's agreement failed
)

var admissionNames = [...]string{"wait", "run", "rejoin", "not a member", "not agreed"}

func (a admission) String() string { return admissionNames[a] }

// admit decides whether the worker may go on to step under the step's
// epoch: a worker the world left out waits as a standby, skips to the
// epoch that takes it back, or stops once its standby is over; a member
// waits for the epoch's outcome (committed, or announced to it) and
// stops if the agreement failed. It returns the outcome it went by.
func admit(v gateView) (admission, *api.Outcome) {
	e := v.job.EpochFor(v.step)
	if !v.member {
		switch {
		case v.rejoin > 0:
			return admitRejoin, nil
		case v.standbyOver:
			return admitNotMember, nil
		}
		return admitWait, nil
	}
	o := e.Outcome
	if o == nil && v.agreed != nil && v.agreed.Agreed {
		o = v.agreed
	}
	switch {
	case o == nil:
		return admitWait, nil
	case !o.Agreed:
		return admitNotAgreed, o
	}
	return admitRun, o
}

// mayStep decides, once the worker holds the state step needs, whether
// the job lets it run the step now: not past the job's last step (the
// job ends once its last checkpoint is committed, unless a rollback sends
// the ranks back), not past the step a paused job stopped at, and within
// the horizon of the step's epoch (committed progress plus the window,
// never the next epoch's boundary) or the furthest step the leader
// granted since (grant). why says what it waits for.
func mayStep(job *api.Job, step, grant uint64) (ok bool, why string) {
	e := job.EpochFor(step)
	switch {
	case job.Spec.Steps > 0 && step > job.Spec.Steps:
		return false, fmt.Sprintf("every step ran (%d): the last checkpoint's commit", job.Spec.Steps)
	case job.Paused != "" && step > job.PausedAt:
		return false, fmt.Sprintf("paused at step %d: %s", job.PausedAt, job.Paused)
	}
	if h := max(job.Horizon(e.Epoch), grant); h < step {
		return false, fmt.Sprintf("horizon %d", h)
	}
	return true, ""
}
