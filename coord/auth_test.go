package coord_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tmmu/tmmu/coord/api"
)

// TestAPITokenGuardsMutations: with a token set, every mutating call
// (job submit, replan, voter add and remove) without it, with a wrong one
// or with the read token is refused with 401 before it reaches raft; the
// reads that show jobs, IRs, plans and hashes need the API token or the
// read token; health and metrics need none.
func TestAPITokenGuardsMutations(t *testing.T) {
	c, li := startCluster(t)
	for _, n := range c.Nodes {
		n.SetAPIToken("t0ken")
		n.SetReadToken("r3ad")
	}
	base := c.URLs()[li]
	// Bodies the handlers refuse at once (unknown fields), so a call
	// that gets past the token check answers 400 quickly.
	calls := []struct{ method, path, body string }{
		{"POST", "/v1/jobs", `{"bogus": 1}`},
		{"POST", "/v1/jobs/x/replan", `{"bogus": 1}`},
		{"POST", "/v1/voters", `{"bogus": 1}`},
		{"DELETE", "/v1/voters/c9", ``},
	}
	// send makes a call with an Authorization header (none when empty)
	// and returns the status.
	send := func(method, path, body, auth string) int {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, call := range calls {
		for _, auth := range []string{"", "Bearer wrong", "t0ken", "Bearer t0ken0", "Bearer r3ad"} {
			if s := send(call.method, call.path, call.body, auth); s != http.StatusUnauthorized {
				t.Errorf("%s %s with %q: %d, want 401", call.method, call.path, auth, s)
			}
		}
		// With the token the call gets past the check (and fails, or
		// not, on its own merits).
		if send(call.method, call.path, call.body, "Bearer t0ken") == http.StatusUnauthorized {
			t.Errorf("%s %s with the token: 401", call.method, call.path)
		}
	}
	get := func(path, auth string) int { t.Helper(); return send("GET", path, "", auth) }
	reads := []string{"/v1/jobs", "/v1/status", "/v1/jobs/x", "/v1/jobs/x/ir", "/v1/jobs/x/ranks/0/plan"}
	for _, path := range reads {
		for _, auth := range []string{"", "Bearer wrong", "r3ad"} {
			if s := get(path, auth); s != http.StatusUnauthorized {
				t.Errorf("GET %s with %q: %d, want 401", path, auth, s)
			}
		}
		for _, auth := range []string{"Bearer t0ken", "Bearer r3ad"} {
			// Not refused for want of a token (404: no job x).
			if s := get(path, auth); s == http.StatusUnauthorized {
				t.Errorf("GET %s with %q: 401", path, auth)
			}
		}
	}
	for _, path := range []string{"/livez", "/metrics"} {
		if s := get(path, ""); s != http.StatusOK {
			t.Errorf("GET %s: %d", path, s)
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf("tmmu_coordinator_unauthorized_requests_total %d", 5*len(calls)+3*len(reads)); !strings.Contains(string(body), want) {
		t.Errorf("the refused calls are not counted (want %q):\n%s", want, body)
	}
}

// TestTokenFollowsRedirects: a client that reaches a follower under
// another host name ("localhost" for the leader's 127.0.0.1) is
// redirected to the leader with its token (net/http would drop it).
func TestTokenFollowsRedirects(t *testing.T) {
	c, li := startCluster(t)
	for _, n := range c.Nodes {
		n.SetAPIToken("t0ken")
	}
	follower := (li + 1) % len(c.Nodes)
	cl := api.NewClient(strings.Replace(c.URLs()[follower], "127.0.0.1", "localhost", 1))
	cl.Token = "t0ken"
	_, err := cl.Submit(t.Context(), &api.SubmitRequest{Name: "not a valid name"})
	if err == nil || strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "job name") {
		t.Fatalf("a submission through a follower: %v (want the leader's answer about the name, not 401)", err)
	}
	t.Logf("the leader answered: %v", err)
}
