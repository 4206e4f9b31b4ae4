package trust

import (
	"bytes"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A file is what a snapshot records of one file.
type file struct {
	Mode fs.FileMode
	Data string
}

// snapshot returns every file and directory under dir by relative path;
// directories have no data.
func snapshot(t *testing.T, dir string) map[string]file {
	t.Helper()
	files := make(map[string]file)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		f := file{Mode: info.Mode()}
		if !d.IsDir() {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			f.Data = string(data)
		}
		files[filepath.ToSlash(rel)] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// renderAuth is a natsAuth that lists the users, one a line.
func renderAuth(users []NATSUser) ([]byte, error) {
	var b bytes.Buffer
	for _, u := range users {
		fmt.Fprintf(&b, "%s %s %s\n", u.Role, u.ID, u.Nkey)
	}
	return b.Bytes(), nil
}

// generate runs Generate with renderAuth or fails the test.
func generate(t *testing.T, dir string, p Plan) []NATSUser {
	t.Helper()
	users, err := Generate(dir, p, renderAuth)
	if err != nil {
		t.Fatal(err)
	}
	return users
}

// ids returns "role/id" of each user.
func ids(users []NATSUser) []string {
	var s []string
	for _, u := range users {
		s = append(s, u.Role+"/"+u.ID)
	}
	return s
}

// layoutDirs are the directories of a layout, relative to it.
var layoutDirs = []string{".", "coordinator", "worker", "operator", "nats", "etcd"}

// wantModes returns the modes of layoutDirs and files, keys readable or not.
func wantModes(files []string, readable bool) map[string]fs.FileMode {
	key := fs.FileMode(0o600)
	if readable {
		key = 0o644
	}
	m := make(map[string]fs.FileMode)
	for _, d := range layoutDirs {
		m[d] = fs.ModeDir | 0o700
	}
	for _, f := range files {
		if strings.HasSuffix(f, ".crt") || strings.HasSuffix(f, ".pub") {
			m[f] = 0o644
		} else { // keys, seeds, tokens, auth.conf
			m[f] = key
		}
	}
	return m
}

// layoutFiles lists the files of a layout with these coordinators,
// workers and operators.
func layoutFiles(coords, workers, ops []string) []string {
	files := []string{"ca.crt", "ca.key", "signing.pub", "read-token",
		"coordinator/signing.key", "operator/api-token", "nats/auth.conf",
		"nats/nats.crt", "nats/nats.key", "etcd/etcd.crt", "etcd/etcd.key"}
	for _, id := range coords {
		files = append(files, "coordinator/"+id+".crt", "coordinator/"+id+".key", "coordinator/"+id+".nk")
	}
	for _, id := range workers {
		files = append(files, "worker/"+id+".crt", "worker/"+id+".key", "worker/"+id+".nk")
	}
	for _, id := range ops {
		files = append(files, "operator/"+id+".crt", "operator/"+id+".key")
	}
	return files
}

func TestGenerate(t *testing.T) {
	for _, readable := range []bool{false, true} {
		t.Run(fmt.Sprintf("FilesReadable=%v", readable), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "secrets")
			plan := Plan{
				Coordinators:  []string{"c1", "c0"},
				Workers:       []string{"w0"},
				Hosts:         []string{"tmmu.test", "10.0.0.1", "localhost"},
				FilesReadable: readable,
			}
			users := generate(t, dir, plan)
			if want := []string{"coordinator/c0", "coordinator/c1", "worker/w0"}; !slices.Equal(ids(users), want) {
				t.Errorf("users %q, want %q", ids(users), want)
			}
			first := snapshot(t, dir)
			got := make(map[string]fs.FileMode)
			for p, f := range first {
				got[p] = f.Mode
			}
			paths := layoutFiles([]string{"c0", "c1"}, []string{"w0"}, []string{"operator"})
			if diff := cmp.Diff(wantModes(paths, readable), got); diff != "" {
				t.Errorf("files and modes (-want +got):\n%s", diff)
			}
			checkLayout(t, Layout{Dir: dir}, users)

			// Again: nothing changes.
			if again := generate(t, dir, plan); !slices.Equal(again, users) {
				t.Errorf("second run users %v, want %v", again, users)
			}
			if diff := cmp.Diff(first, snapshot(t, dir)); diff != "" {
				t.Errorf("second run changed files (-before +after):\n%s", diff)
			}

			// A new worker: only its files appear, and the NATS users grow.
			plan.Workers = append(plan.Workers, "w1")
			users = generate(t, dir, plan)
			if want := []string{"coordinator/c0", "coordinator/c1", "worker/w0", "worker/w1"}; !slices.Equal(ids(users), want) {
				t.Errorf("users %q, want %q", ids(users), want)
			}
			second := snapshot(t, dir)
			var added, changed []string
			for p, f := range second {
				if old, ok := first[p]; !ok {
					added = append(added, p)
				} else if old != f {
					changed = append(changed, p)
				}
			}
			slices.Sort(added)
			if want := []string{"worker/w1.crt", "worker/w1.key", "worker/w1.nk"}; !slices.Equal(added, want) {
				t.Errorf("added %q, want %q", added, want)
			}
			if want := []string{"nats/auth.conf"}; !slices.Equal(changed, want) {
				t.Errorf("changed %q, want %q", changed, want)
			}

			// Dropping w0 from the plan keeps its identity: its seed is on disk.
			users = generate(t, dir, Plan{Workers: []string{"w1"}, FilesReadable: readable})
			if want := []string{"coordinator/c0", "coordinator/c1", "worker/w0", "worker/w1"}; !slices.Equal(ids(users), want) {
				t.Errorf("users %q after dropping w0 from the plan, want %q", ids(users), want)
			}
		})
	}
}

// checkLayout checks what a Generate with coordinators c0 and c1, worker w0
// and hosts tmmu.test, 10.0.0.1 and localhost wrote.
func checkLayout(t *testing.T, l Layout, users []NATSUser) {
	t.Helper()
	ca, err := LoadCA(l.CACert(), l.CAKey())
	if err != nil {
		t.Fatal(err)
	}
	if ca.Cert.NotAfter.Sub(ca.Cert.NotBefore) < caValidity {
		t.Errorf("CA valid %v, want 10 years", ca.Cert.NotAfter.Sub(ca.Cert.NotBefore))
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	for _, tc := range []struct {
		role, id string
		hosts    []string
	}{
		{RoleCoordinator, "c0", []string{"c0", "localhost", "127.0.0.1", "tmmu.test", "10.0.0.1"}},
		{RoleNATS, "nats", []string{"nats", "localhost", "127.0.0.1", "tmmu.test", "10.0.0.1"}},
		{RoleEtcd, "etcd", []string{"etcd", "localhost", "127.0.0.1", "tmmu.test", "10.0.0.1"}},
		{RoleWorker, "w0", nil},
		{RoleOperator, "operator", nil},
	} {
		f := l.TLS(tc.role, tc.id)
		if err := f.Validate(); err != nil {
			t.Errorf("%s/%s: %v", tc.role, tc.id, err)
			continue
		}
		c, err := readCert(f.Cert)
		if err != nil {
			t.Fatal(err)
		}
		if role, id, _ := CertIdentity(c); role != tc.role || id != tc.id {
			t.Errorf("%s holds %s/%s", f.Cert, role, id)
		}
		if d := c.NotAfter.Sub(c.NotBefore) - backdate; d != defaultLeafValidity {
			t.Errorf("%s valid %v, want %v", f.Cert, d, defaultLeafValidity)
		}
		var sans []string
		sans = append(sans, c.DNSNames...)
		for _, ip := range c.IPAddresses {
			sans = append(sans, ip.String())
		}
		slices.Sort(sans)
		want := slices.Sorted(slices.Values(tc.hosts))
		if !slices.Equal(sans, want) {
			t.Errorf("%s SANs %q, want %q", f.Cert, sans, want)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", f.Cert, err)
		}
	}

	s, err := LoadSigner(l.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(l.VerifyKey())
	if err != nil {
		t.Fatal(err)
	}
	if !v.Verify([]byte("m"), s.Sign([]byte("m"))) {
		t.Error("signing.pub does not verify signing.key")
	}

	for _, f := range []string{l.APIToken(), l.ReadToken()} {
		tok, err := os.ReadFile(f)
		if raw, derr := hex.DecodeString(string(tok)); err != nil || derr != nil || len(raw) != 32 {
			t.Errorf("%s holds %q (%v), want 64 hex digits", f, tok, err)
		}
	}
	api, _ := os.ReadFile(l.APIToken())
	read, _ := os.ReadFile(l.ReadToken())
	if bytes.Equal(api, read) {
		t.Error("API and read tokens are equal")
	}

	for _, u := range users {
		seed, err := os.ReadFile(l.Nkey(u.Role, u.ID))
		if err != nil {
			t.Fatal(err)
		}
		if pub, err := userNkey(seed); err != nil || pub != u.Nkey {
			t.Errorf("%s/%s: seed's public key %q (%v), user has %q", u.Role, u.ID, pub, err, u.Nkey)
		}
	}
	auth, err := os.ReadFile(l.NATSAuth())
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := renderAuth(users); !bytes.Equal(auth, want) {
		t.Errorf("auth.conf:\n%s\nwant:\n%s", auth, want)
	}
}

func TestGenerateNoNATSAuth(t *testing.T) {
	dir := t.TempDir()
	users, err := Generate(dir, Plan{Workers: []string{"w0"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(users), []string{"worker/w0"}) {
		t.Errorf("users %q", ids(users))
	}
	if _, err := os.Stat(Layout{Dir: dir}.NATSAuth()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("auth.conf written without natsAuth: %v", err)
	}
	_, err = Generate(dir, Plan{}, func([]NATSUser) ([]byte, error) { return nil, errors.New("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("natsAuth failing: %v", err)
	}
}

// A bad plan is refused, every problem at once, before anything is written.
func TestGenerateBadPlan(t *testing.T) {
	for _, tc := range []struct {
		name string
		plan Plan
		want []string
	}{
		{"bad ids", Plan{Coordinators: []string{"c/0"}, Workers: []string{""}, Operators: []string{"op 1"}},
			[]string{"coordinator", "worker", "operator"}},
		{"duplicate", Plan{Workers: []string{"w0", "w1", "w0"}}, []string{`worker "w0" listed twice`}},
		{"reserved", Plan{Coordinators: []string{"signing"}}, []string{`"signing" is reserved`}},
		{"empty host", Plan{Hosts: []string{""}}, []string{"empty host"}},
		{"negative validity", Plan{ValidFor: -day}, []string{"negative"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "secrets")
			_, err := Generate(dir, tc.plan, renderAuth)
			if err == nil || !strings.HasPrefix(err.Error(), "trust: ") {
				t.Fatalf("Generate = %v, want a trust: error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("a refused plan wrote %s (%v)", dir, err)
			}
		})
	}
}

// Half of a pair, or a public signing key without its private key, is an
// error and not replaced.
func TestGenerateIncomplete(t *testing.T) {
	l := Layout{Dir: t.TempDir()}
	plan := Plan{Coordinators: []string{"c0"}, Workers: []string{"w0"}}
	generate(t, l.Dir, plan)
	other := newSigner(t)
	otherPub, _ := PublicPEM(other.Public())
	for _, tc := range []struct {
		name   string
		change func(t *testing.T)
		want   string
	}{
		{"CA key gone", func(t *testing.T) { remove(t, l.CAKey()) }, "ca.key does not"},
		{"CA cert gone", func(t *testing.T) { remove(t, l.CACert()) }, "ca.crt does not"},
		{"worker key gone", func(t *testing.T) { remove(t, l.Key(RoleWorker, "w0")) }, "w0.key does not"},
		{"coordinator cert gone", func(t *testing.T) { remove(t, l.Cert(RoleCoordinator, "c0")) }, "c0.crt does not"},
		{"signing key gone", func(t *testing.T) { remove(t, l.SigningKey()) }, "signing.key does not"},
		{"signing.pub of another key", func(t *testing.T) {
			if err := os.WriteFile(l.VerifyKey(), otherPub, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "does not hold the public key"},
		{"corrupt seed", func(t *testing.T) {
			if err := os.WriteFile(l.Nkey(RoleWorker, "w0"), []byte("SUjunk"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "w0.nk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, l.Dir)
			defer restore(t, l.Dir, before)
			tc.change(t)
			changed := snapshot(t, l.Dir)
			_, err := Generate(l.Dir, plan, renderAuth)
			if err == nil || !strings.HasPrefix(err.Error(), "trust: ") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Generate = %v, want a trust: error with %q", err, tc.want)
			}
			if diff := cmp.Diff(changed, snapshot(t, l.Dir)); diff != "" {
				t.Errorf("a refused Generate changed files (-before +after):\n%s", diff)
			}
		})
	}
	// signing.key without signing.pub is completed from the key.
	remove(t, l.VerifyKey())
	generate(t, l.Dir, plan)
	s, err := LoadSigner(l.SigningKey())
	if err != nil {
		t.Fatal(err)
	}
	if v, err := LoadVerifier(l.VerifyKey()); err != nil || !v.Verify(nil, s.Sign(nil)) {
		t.Errorf("signing.pub not rewritten from signing.key: %v", err)
	}
}

// remove removes file or fails the test.
func remove(t *testing.T, file string) {
	t.Helper()
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
}

// restore rewrites dir's files as snap recorded them.
func restore(t *testing.T, dir string, snap map[string]file) {
	t.Helper()
	for _, p := range slices.Sorted(maps.Keys(snap)) {
		f := snap[p]
		if f.Mode.IsDir() {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(f.Data), f.Mode); err != nil {
			t.Fatal(err)
		}
	}
}
