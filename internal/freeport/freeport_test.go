package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in string
		lo int
		ok bool
	}{
		{"32768\t60999\n", 32768, true},
		{"1024 65535", 1024, true},
		{"", 0, false},
		{"32768", 0, false},
		{"x 60999", 0, false},
		{"0 60999", 0, false},
		{"70000 80000", 0, false},
	} {
		lo, ok := parseRange(c.in)
		if lo != c.lo || ok != c.ok {
			t.Errorf("parseRange(%q) = %d, %v; want %d, %v", c.in, lo, ok, c.lo, c.ok)
		}
	}
}

// TestAddr: each address can be listened on, none repeats, and where the
// kernel's ephemeral range is known every port lies below it.
func TestAddr(t *testing.T) {
	lo, known := ephemeralStart()
	seen := map[string]bool{}
	for range 200 {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[a] {
			t.Fatalf("%s returned twice", a)
		}
		seen[a] = true
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if known && lo > lowest && (port < lowest || port >= lo) {
			t.Fatalf("port %d outside [%d, %d): an outgoing connection may take it", port, lowest, lo)
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("listening on %s: %v", a, err)
		}
		l.Close()
	}
	if !known {
		t.Log("ephemeral range unknown here: the kernel picked the ports")
	}
}
