package worker_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The engine's cpu kernel workers live as long as the process.
		goleak.IgnoreTopFunction("github.com/tmmu/tmmu/engine.KernelWorker"),
		// nats.go v1.55.0: ObjectStore.Put publishes through a private
		// JetStream context, which starts a goroutine that reads its
		// status channel under a lock, and removes that channel (sets
		// it to nil) when Put returns. When the removal wins the race
		// (a loaded machine) the goroutine waits on a nil channel for
		// ever: one parked goroutine per such Put, in the library.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// nats.go v1.55.0: ObjectStore.List reads a watcher whose
		// message callback sends each object's info on a channel of 32;
		// a List whose context ends (the leader collecting checkpoint
		// objects of 64 ranks as the cluster closes) stops reading, and
		// the callback stays blocked on the send, in the library.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*obs).Watch.func1"))
}
