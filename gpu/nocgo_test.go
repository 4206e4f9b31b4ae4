//go:build !cgo

package gpu

import (
	"errors"
	"os"
	"testing"
)

func TestOpenWithoutCgo(t *testing.T) {
	_, err := Open(Options{})
	if !errors.Is(err, ErrNoAdapter) {
		t.Fatalf("Open: %v, want ErrNoAdapter", err)
	}
	if os.Getenv("TMMU_REQUIRE_WEBGPU") == "1" {
		t.Fatalf("TMMU_REQUIRE_WEBGPU=1 but: %v", err)
	}
	t.Skipf("the WebGPU tests need cgo: %v", err)
}
