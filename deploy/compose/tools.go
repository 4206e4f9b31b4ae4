//go:build tools

package compose

// The cluster's NATS and etcd binaries are built from these modules (make
// binaries); importing them here keeps their dependencies in go.mod.
import (
	_ "github.com/nats-io/nats-server/v2"
	_ "go.etcd.io/etcd/server/v3"
)
