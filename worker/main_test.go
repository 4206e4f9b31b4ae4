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
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}
