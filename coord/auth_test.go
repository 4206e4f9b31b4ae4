package coord

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAPITokenGuardsMutations: with a token set, every mutating call
// (job submit, replan, voter add and remove) without it or with a wrong
// one is refused with 401 before it reaches raft; reads need none.
func TestAPITokenGuardsMutations(t *testing.T) {
	c, li := startCluster(t)
	for _, n := range c.Nodes {
		n.SetAPIToken("t0ken")
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
	for _, call := range calls {
		for _, auth := range []string{"", "Bearer wrong", "t0ken", "Bearer t0ken0"} {
			req, _ := http.NewRequest(call.method, base+call.path, strings.NewReader(call.body))
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with %q: %s, want 401", call.method, call.path, auth, resp.Status)
			}
		}
		// With the token the call gets past the check (and fails, or
		// not, on its own merits).
		req, _ := http.NewRequest(call.method, base+call.path, strings.NewReader(call.body))
		req.Header.Set("Authorization", "Bearer t0ken")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized {
			t.Errorf("%s %s with the token: 401", call.method, call.path)
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "tmmu_coordinator_unauthorized_requests_total 16") {
		t.Errorf("the 16 refused calls are not counted:\n%s", body)
	}
	for _, path := range []string{"/v1/jobs", "/v1/status", "/readyz", "/metrics"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// Not refused for want of a token (a 503 /readyz is a node that
		// lost the leadership a moment on a loaded machine).
		if resp.StatusCode == http.StatusUnauthorized || (resp.StatusCode != http.StatusOK && path != "/readyz") {
			t.Errorf("GET %s: %s", path, resp.Status)
		}
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
	cl := NewClient(strings.Replace(c.URLs()[follower], "127.0.0.1", "localhost", 1))
	cl.Token = "t0ken"
	_, err := cl.Submit(t.Context(), &SubmitRequest{Name: "not a valid name"})
	if err == nil || strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "job name") {
		t.Fatalf("a submission through a follower: %v (want the leader's answer about the name, not 401)", err)
	}
	t.Logf("the leader answered: %v", err)
}
