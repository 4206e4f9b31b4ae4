package faults

import (
	"bufio"
	"bytes"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	etcdtls "go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/tmmu/tmmu/internal/coordd"
	"github.com/tmmu/tmmu/internal/workerd"
	"github.com/tmmu/tmmu/trust"
)

// roleEnv names the role a re-executed test binary plays.
const roleEnv = "FAULTS_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// runRole runs one daemon of the cluster in this process.
func runRole(role string, args []string) int {
	switch role {
	case "coordinator":
		return coordd.Main(args, os.Stderr)
	case "worker":
		return workerd.Main(args, os.Stderr)
	case "nats":
		// args: port store-dir config (TLS with client certificates, a
		// user per identity)
		port, _ := strconv.Atoi(args[0])
		o, err := natsserver.ProcessConfigFile(args[2])
		if err != nil {
			fmt.Fprintln(os.Stderr, "nats:", err)
			return 1
		}
		o.Host, o.Port, o.JetStream, o.StoreDir, o.NoSigs = "127.0.0.1", port, true, args[1], true
		s, err := natsserver.NewServer(o)
		if err != nil {
			fmt.Fprintln(os.Stderr, "nats:", err)
			return 1
		}
		s.ConfigureLogger()
		go s.Start()
		if !s.ReadyForConnections(30 * time.Second) {
			fmt.Fprintln(os.Stderr, "nats: not ready")
			return 1
		}
		fmt.Fprintln(os.Stderr, "nats: ready")
		waitSignal()
		s.Shutdown()
		s.WaitForShutdown()
		return 0
	case "etcd":
		// args: dir client-url peer-url secrets (clients need a
		// certificate of the cluster's CA)
		cfg := embed.NewConfig()
		l := trust.Layout{Dir: args[3]}
		cfg.ClientTLSInfo = etcdtls.TLSInfo{CertFile: l.Cert(trust.RoleEtcd, trust.RoleEtcd), KeyFile: l.Key(trust.RoleEtcd, trust.RoleEtcd),
			TrustedCAFile: l.CACert(), ClientCertAuth: true}
		cfg.Dir = args[0]
		cu, _ := url.Parse(args[1])
		pu, _ := url.Parse(args[2])
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.InitialCluster = cfg.Name + "=" + pu.String()
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "etcd:", err)
			return 1
		}
		select {
		case <-e.Server.ReadyNotify():
		case err := <-e.Err():
			fmt.Fprintln(os.Stderr, "etcd:", err)
			return 1
		}
		fmt.Fprintln(os.Stderr, "etcd: ready")
		waitSignal()
		e.Close()
		return 0
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 2
}

func waitSignal() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}

// proc is one daemon process of the cluster.
type proc struct {
	name string
	role string
	args []string
	log  string // its stderr

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	err      error
	expected bool // the test stopped it
	runs     int
}

// cluster is the processes of one test, and every exit nobody asked for.
type cluster struct {
	t     *testing.T
	dir   string
	mu    sync.Mutex
	procs map[string]*proc
	// exits lists the processes that exited without the test killing
	// or stopping them.
	exits []exit
}

// exit is a process's exit that the test did not cause.
type exit struct {
	name string
	run  int
	at   time.Time
	err  error
}

func newCluster(t *testing.T) *cluster {
	c := &cluster{t: t, dir: t.TempDir(), procs: map[string]*proc{}}
	t.Cleanup(func() {
		c.mu.Lock()
		ps := make([]*proc, 0, len(c.procs))
		for _, p := range c.procs {
			ps = append(ps, p)
		}
		c.mu.Unlock()
		for _, p := range ps {
			p.kill()
		}
	})
	return c
}

// add registers a process (started with start).
func (c *cluster) add(name, role string, args ...string) *proc {
	p := &proc{name: name, role: role, args: args, log: filepath.Join(c.dir, name+".log")}
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	return p
}

// start starts p (again), appending to its log.
func (c *cluster) start(p *proc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	p.runs++
	fmt.Fprintf(f, "=== run %d at %s\n", p.runs, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(os.Args[0], p.args...)
	cmd.Env = append(os.Environ(), roleEnv+"="+p.role)
	dieWithParent(cmd)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		c.t.Fatalf("starting %s: %v", p.name, err)
	}
	p.cmd, p.exited, p.expected, p.err = cmd, make(chan struct{}), false, nil
	exited := p.exited
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.err = err
		unexpected := !p.expected
		p.mu.Unlock()
		if unexpected {
			c.mu.Lock()
			c.exits = append(c.exits, exit{p.name, p.runs, time.Now(), err})
			c.mu.Unlock()
		}
		close(exited)
	}()
}

// signal sends sig and waits for the exit.
func (p *proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	if cmd != nil {
		p.expected = true
	}
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
}

func (p *proc) kill() { p.signal(syscall.SIGKILL) }
func (p *proc) stop() { p.signal(syscall.SIGTERM) }

// done reports whether p exited, and how.
func (p *proc) done() (bool, error) {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.err
	default:
		return false, nil
	}
}

// waitLine waits until p's log has a line containing s.
func (p *proc) waitLine(t *testing.T, s string, timeout time.Duration) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if data, _ := os.ReadFile(p.log); bytes.Contains(data, []byte(s)) {
			return
		}
	}
	t.Fatalf("%s did not say %q within %s:\n%s", p.name, s, timeout, tail(p.log, 20))
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// lines calls f with every line of path.
func lines(path string, f func(string)) {
	fh, err := os.Open(path)
	if err != nil {
		return
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f(sc.Text())
	}
}
