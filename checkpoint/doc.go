// Package checkpoint is the format and the storage of a job's training
// state: at a checkpoint step every rank writes its shard — parameters,
// optimizer state, the optimizer's step count, the step (the data cursor)
// and the seed (the RNG state: every draw derives from seed, step and
// rank) — as one content-addressed object, and the coordinator leader
// commits a manifest naming every rank's digest once the whole world
// reported (package coord; the decisions are package recovery's).
//
// # Shards
//
// A Shard encodes as canonical CBOR (Encode): equal states are equal
// bytes, named by their SHA-256. Decode checks the digest before anything
// else, so a flipped byte anywhere is a CHECKPOINT_CORRUPT failure naming
// the object, never a wrong state. Each tensor records the whole tensor's
// size and the offset of the elements the rank holds, so a checkpoint
// written under one world restores under another: Layout says which slice
// of every persistent tensor a rank of a data-parallel group holds (whole,
// or its ZeRO partition), and Recut assembles those slices from the old
// world's shards, refusing gaps and shards that disagree. Gather
// reassembles the whole, unpartitioned state.
//
// # Stores
//
// A Store holds objects by name; ObjectName is "<job>/<step>/<rank>/
// <digest>", one writer per name. NATSStore keeps them in a JetStream
// object store bucket (DefaultBucket), the default: NATS already runs
// beside every tmmu cluster, and the bucket is replicated when NATS is
// clustered. DirStore keeps them as files, for one machine. A store with
// no room refuses with CHECKPOINT_STORE_FULL (ErrStoreFull): a stream at
// its MaxBytes, a full disk, or DirStore's own bound (SetMaxBytes).
package checkpoint
