// Package planner plans tensor memory: UML_OS.TMMU.PlanMemory_v2 of the
// spec (shared/seeds/tmmu-prepare-memory-v2.md). It is pure: values in,
// values out, no clock, no goroutines of its own, no global state, so every
// machine given the same graph and options computes the byte-identical plan
// and the same tmmu_plan_hash. Options.Spawn lends the packed strategy the
// caller's goroutines; the plan is the same with or without them.
//
// # Pipeline
//
// PlanMemory runs liveness, then the strategy's placement. With the spec's
// slots strategy these are three operators, each exported on its own:
//
//	live := AnalyzeLiveness(g, mode)            // AnalyzeLiveness_v1
//	asg := AssignLogicalSlots(g, live, arenas)  // AssignLogicalSlots_v1
//	lay, err := MapToVirtualAddresses(asg, arenas) // MapToVirtualAddresses_v1
//
// and assembles a Plan: the tensor_map (tensor → arena, logical slot,
// offset, size, lifetime, alignment), per-arena metrics, and the hashes of
// spec II.K.
//
// # Lifetimes
//
// Positions number the nodes the mode executes, in execution order. A
// tensor lives from the node that writes it to the last node that reads or
// writes it, both ends included: a node's inputs and outputs are live at the
// same position, so a kernel never finds an output written over one of its
// inputs. A chain of out-of-place ops therefore needs 2 slots; the spec's
// "linear chain → 1 slot" is a chain of in-place ops (in_place_write), which
// this convention also gives 1 slot:
//
//	x → relu → a → relu → b → relu → c     2 slots: a,c in slot 0; x,b in slot 1
//	a → relu_ → relu_ → relu_              1 slot
//
// Modes choose the nodes and the retention rules:
//
//	inference   forward nodes; nothing kept for backward
//	forward     forward nodes; tensors a later phase reads (or marked
//	            saved_for_backward) live to the end
//	backward    backward and optimizer nodes; tensors from the forward pass
//	            are live from position 0
//	train_full  every node; saved activations die at their last backward use
//
// Views and alias groups share storage; a storage lives from the first
// birth to the last death of its members (see AnalyzeLiveness).
//
// # Arenas
//
// Each role lives in one arena, and each arena has its own slots and
// offsets (spec §0.N): parameters (persistent: every tensor gets its own
// slot, laid out largest first), optimizer_state (persistent), constants
// (read-only, persistent), activations (inputs, outputs and activations,
// reused by liveness) and gradients (reused by liveness within the
// backward pass). ArenaConfig sets each arena's capacity_bytes (0 =
// unbounded), alignment_bytes (default 128) and page_size (reserved bytes
// are rounded up to it).
//
// # Strategies
//
// Packed (the default) places every storage at its own byte offset with
// package pack: a portfolio of best-fit placements and, where that stays
// above the lower bound, a search over canonical placements, at an effort
// (fast or exact) counted in deterministic work units. Its logical slots
// are an arena's distinct offsets, numbered ascending, each as large as its
// largest tenant; the slot tables of the plan hash keep their form. In an
// arena where the spec's slot layout peaks lower, packed keeps that layout,
// so it never uses more bytes than slots. GreedySize is the classic
// baseline (largest first, first fit), kept for comparison. A capacity no
// placement found fits fails with ARENA_TOO_SMALL, saying whether the lower
// bound alone exceeds it.
//
// # Slots and offsets (the slots strategy)
//
// In each arena, storages are taken by birth ascending, size descending and
// tensor id ascending, and each takes the lowest slot free at its birth.
// Interval graphs are perfect, so the number of slots equals max_live, the
// most storages live at one position. A slot is as large as its largest
// tenant; slots are laid out by aligned prefix sum. The result is optimal
// in slots but not in bytes: lower_bound_bytes, the most bytes live at one
// position, is what no placement can beat, and the plan reports how far
// peak_bytes is above it.
//
// # Hashes
//
// tmmu_plan_hash = SHA-256(CBOR(["tmmu_plan_v1", [ir_hash, mode,
// arena_config_hash, execution_order_hash, rank, world_size,
// shard_spec_hash, slot_assignment_table, logical_address_table]])), where
// the tables are the spec operators' outputs as canonical CBOR maps,
// tensor_id → [arena, slot] (beside the replay token) and [arena, slot] →
// offset (see Plan.ComputeHash). The encoding is streamed into SHA-256 and
// checked against fxamacker/cbor in the tests.
// An unsharded plan has rank 0, world size 1 and NoShardSpecHash; package
// shard plans the ranks of a sharded job, setting all three.
//
// # Verification
//
// Verify re-derives lifetimes and storages from the model with separate
// code and checks a plan against every rule of spec VII.A: no two live
// tensors share a byte unless declared aliases, alignment, slots equal to
// max_live, capacity, and hashes that recompute. Plans round-trip through
// canonical CBOR (EncodeCBOR, DecodePlan): the checkpoint form of spec §10.
package planner
