package localcluster

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The engine's cpu kernel workers live as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/tmmu/tmmu/engine.KernelWorker"))
}
