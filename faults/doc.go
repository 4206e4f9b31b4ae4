// Package faults holds the fault test of a whole tmmu cluster on real
// processes: a nats-server with JetStream on disk, an etcd server, three
// coordinators and four workers, each an operating-system process (the
// test binary run again in the role's code: package coordd, workerd, the
// embedded nats-server and etcd). During one training job it kills and
// restarts NATS, etcd, two coordinators, the raft leader, a worker (for
// 90 s) and replaces another worker with a new process of the same
// identity; the job must finish in exactly the model state of the same
// job run without faults, with no worker process exiting but the killed
// ones. It prints, per fault, the time to the next committed step.
//
// The cluster runs as a deployment does, authenticated throughout: the
// credentials of tmmu secrets init (written by the test), NATS with TLS
// and a user per identity (nats.conf including the rendered
// authorization), etcd with client certificates, raft and the API over
// TLS, signed decisions, and the daemons started with --secrets.
//
//	go test ./faults -v                      # the whole schedule
//	TMMU_FAULTS_WORKER_DOWN=10s go test ./faults   # a shorter worker outage
//
// The package has no code of its own besides the test.
package faults
