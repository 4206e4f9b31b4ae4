// Package coordtest runs several coordinator nodes in one process on
// loopback, each with its HTTP API: the harness of coord's cluster tests,
// of package localcluster (tmmu demo) and of the fault tests. Real
// clusters run one cmd/coordinator per machine.
package coordtest
