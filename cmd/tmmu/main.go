// Command tmmu is the operator CLI of tmmu: it generates and imports model graphs, plans
// their tensor memory, verifies plans, compares strategies and draws plans.
//
//	tmmu gen MODEL [flags]          write a model graph (UML_Model_IR) as JSON or CBOR
//	tmmu import onnx|torch MODEL    import an ONNX file or a PyTorch module, for inference or training
//	tmmu plan IR|-|CSV [flags]      plan tensor memory for a graph or a DSA instance
//	tmmu plan IR --shard-spec SPEC (--rank R | --all-ranks)
//	                                plan one rank, or every rank, of a sharded job
//	tmmu shard validate SPEC        check a shard spec and print its shard_spec_hash
//	tmmu shard view IR --shard-spec SPEC --rank R
//	                                write one rank's rank-local graph
//	tmmu verify IR PLAN             check a plan against its graph
//	tmmu bench [flags]              compare strategies on a suite, every plan verified
//	tmmu viz IR|PLAN|CSV --out F    draw a plan's memory timeline as SVG or HTML
//	tmmu demo [flags]               run a whole cluster in this process and a sharded job on it
//	tmmu job submit|list|history    submit jobs to a coordinator cluster, list them, show their epochs
//	tmmu replan --job J --reason R  ask for a new plan epoch at the next safepoint
//	tmmu status                     the cluster (leader, term, voters) and its jobs
//	tmmu voter add|remove           change the coordinators' raft membership
//	tmmu secrets init DIR           write a cluster's credentials (CA, certificates, NATS nkeys, signing key, tokens)
//	tmmu probe --secrets DIR ...    attack a running cluster with one worker's credentials; exit 1 if it accepts any
//	tmmu version                    the module version, the commit and the Go toolchain
//
// Run "tmmu help COMMAND" for a command's flags.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tmmu/tmmu/failure"
	"github.com/tmmu/tmmu/internal/cli"
)

// exitUsage is the exit status for a malformed command line; failures of the
// work itself exit 1.
const exitUsage = 2

type command struct {
	name    string
	summary string
	usage   string
	run     func(c *command, e *env, args []string) error
}

var commands []*command

func init() {
	commands = []*command{genCmd, importCmd, planCmd, shardCmd, verifyCmd, benchCmd, vizCmd, trainCmd, demoCmd, jobCmd, rankCmd, dataCmd, replanCmd, statusCmd, voterCmd, secretsCmd, probeCmd, versionCmd, completionCmd, healthcheckCmd}
}

// env carries the process's streams so tests can run commands in-process.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	jsonErrors     bool // print failures as JSON on stdout (-o json)
}

func main() {
	os.Exit(run(&env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

func run(e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" && len(args) == 1 {
		usage(e.stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	name := args[0]
	if name == "help" {
		name, args = args[1], []string{args[1], "--help"}
	}
	for _, c := range commands {
		if c.name == name {
			err := c.run(c, e, args[1:])
			return report(e, err)
		}
	}
	fmt.Fprintf(e.stderr, "tmmu: unknown command %q\n\n", name)
	usage(e.stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "tmmu plans tensor memory: liveness, then byte offsets per arena packed toward the lower bound (or the spec's slot layout), sealed by a plan hash a cluster agrees on; and it drives that cluster (jobs, status, replans).")
	fmt.Fprintln(w, "\nUsage:\n  tmmu COMMAND [arguments]\n\nCommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun \"tmmu help COMMAND\" for a command's flags.")
}

// usageError marks a malformed command line.
type usageError struct{ msg string }

func (u usageError) Error() string { return u.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func report(e *env, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(e.stderr, "tmmu: %s\n", ue.msg)
		return exitUsage
	}
	var fe *failure.Error
	if !errors.As(err, &fe) {
		fe = &failure.Error{Code: "ERROR", Message: err.Error()}
	}
	if e.jsonErrors {
		out := struct {
			FailureCode     failure.Code      `json:"failure_code"`
			FailureOperator string            `json:"failure_operator"`
			Message         string            `json:"message"`
			Diagnostics     map[string]string `json:"diagnostics"`
		}{fe.Code, fe.Operator, fe.Message, fe.Diagnostics}
		if out.Diagnostics == nil {
			out.Diagnostics = map[string]string{}
		}
		if fe.Err != nil && !strings.Contains(fe.Message, fe.Err.Error()) {
			out.Diagnostics["cause"] = fe.Err.Error()
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		enc.Encode(out)
		return 1
	}
	fmt.Fprintf(e.stderr, "tmmu: %v\n", err)
	return 1
}

// newFlags returns a FlagSet whose usage prints the command's synopsis.
func newFlags(e *env, c *command) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: tmmu %s\n\n%s\n", c.usage, c.summary)
		var has bool
		fs.VisitAll(func(*flag.Flag) { has = true })
		if has {
			fmt.Fprintln(e.stderr, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parse parses flags that may come before, between or after positional
// arguments, and returns the positional ones. "--" ends flag parsing.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// opIO names the CLI as the operator of I/O failures.
const opIO = "tmmu"

// readInput reads a file, or standard input for "-".
func readInput(e *env, name string) ([]byte, error) {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(e.stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return nil, ioError(err, name)
	}
	return data, nil
}

func ioError(err error, name string) error {
	return failure.New(failure.IOError, opIO, err.Error(), "file", name).Wrap(err)
}

// outputFormat validates -o.
func outputFormat(e *env, o string, allowed ...string) error {
	for _, a := range allowed {
		if o == a {
			e.jsonErrors = o == "json"
			return nil
		}
	}
	return usagef("-o %s: want one of %s", o, strings.Join(allowed, ", "))
}

var healthcheckCmd = &command{
	name:    "healthcheck",
	summary: "Exit 0 when GET URL answers 200 within 3 s: a container healthcheck for images with no shell (NATS's /healthz, etcd's /health).",
	usage:   "healthcheck URL",
	run: func(c *command, e *env, args []string) error {
		if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
			fmt.Fprintf(e.stderr, "Usage: tmmu %s\n\n%s\n", c.usage, c.summary)
			return flag.ErrHelp
		}
		if code := cli.Healthcheck(args); code != 0 {
			return fmt.Errorf("healthcheck %v failed", args)
		}
		return nil
	},
}
