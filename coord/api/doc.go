// Package api is the coordinator's vocabulary as workers and tools see
// it: the replicated state machine of jobs and plan epochs (State, Job,
// Epoch, Command and the pure State.Apply), the bodies of the HTTP API
// (SubmitRequest, ReplanRequest, Status, APIError, ...) and Client, which
// calls that API across coordinators with retries and turns a server's
// failure back into a typed *failure.Error.
//
// It depends on neither raft nor bolt: package coord runs the state
// machine under hashicorp/raft and serves the API; a worker needs only
// this package.
package api
