package failure

import (
	"errors"
	"fmt"
	"testing"
)

func TestIsByCode(t *testing.T) {
	err := fmt.Errorf("loading: %w", New(LivenessCycle, "UML_OS.Model.AnalyzeLiveness_v1", "cycle", "node", "n3"))
	if !errors.Is(err, LivenessCycle) {
		t.Fatalf("errors.Is(%v, LivenessCycle) = false", err)
	}
	if errors.Is(err, ArenaTooSmall) {
		t.Fatalf("errors.Is(%v, ArenaTooSmall) = true", err)
	}
	var fe *Error
	if !errors.As(err, &fe) || fe.Diagnostics["node"] != "n3" {
		t.Fatalf("errors.As: got %+v", fe)
	}
	if got := CodeOf(err); got != LivenessCycle {
		t.Fatalf("CodeOf = %q", got)
	}
	if got := CodeOf(errors.New("plain")); got != "" {
		t.Fatalf("CodeOf(plain) = %q", got)
	}
}

func TestErrorString(t *testing.T) {
	e := New(ArenaTooSmall, "op", "too small", "arena", "activations", "capacity_bytes", 10)
	want := "ARENA_TOO_SMALL: too small (arena=activations, capacity_bytes=10)"
	if e.Error() != want {
		t.Fatalf("got %q want %q", e.Error(), want)
	}
}

// TestErrorStringCause: a cause is appended after the diagnostics, unless
// the message already spells it out (callers often build the message from
// the cause), so no message is printed twice.
func TestErrorStringCause(t *testing.T) {
	cause := errors.New("line 3: size is negative")
	for _, c := range []struct {
		e    *Error
		want string
	}{
		{New(InvalidEncoding, "op", "cannot read", "file", "a.csv").Wrap(cause), "INVALID_ENCODING: cannot read (file=a.csv): line 3: size is negative"},
		{New(InvalidEncoding, "op", cause.Error(), "file", "a.csv").Wrap(cause), "INVALID_ENCODING: line 3: size is negative (file=a.csv)"},
		{New(InvalidEncoding, "op", "decode: "+cause.Error()).Wrap(cause), "INVALID_ENCODING: decode: line 3: size is negative"},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}
