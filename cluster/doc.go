// Package cluster joins shardhost hosts into a cluster: membership with the lifecycle
// of Akka's cluster specification, the cluster singleton, and the node-to-node
// transport that every layer above uses to talk to other members. The design and its
// vocabulary are in docs/design.md.
//
// Core is the membership protocol as a pure state machine: the gossiped membership
// state (a CRDT of members, statuses, a vector clock, a seen set and reachability; see
// Gossip), convergence, the leader's actions on convergence (joining → up, exiting →
// removed), phi accrual failure detection of up to 5 neighbours on a hashed ring, and
// the split brain resolver (keep-majority, static-quorum, keep-oldest, down-all), the
// only way besides an operator that a member becomes down. Core never reads a clock:
// it is driven by Tick(now) and Step(message) and returns what to send, and the tests
// run several Cores on a simulated clock (sim_test.go).
//
// Membership runs one Core on one goroutine and carries its messages over
// hashicorp/memberlist (streams for state, datagrams for heartbeats, push-pull for
// anti-entropy, the keyring for encryption). It publishes the current View, reports
// lifecycle events (MemberUp, MemberLeft, MemberExited, MemberDowned, MemberRemoved,
// UnreachableMember, ReachableMember, LeaderChanged) to non-blocking subscriptions,
// runs leave hooks before a leaving member exits, and lets upper layers share small
// state through push-pull and broadcasts (StateDelegate). InmemGossipNetwork is
// memberlist's transport without sockets, for tests. Singleton runs a service on the
// oldest up member (of a role) and moves it when that member leaves or fails.
//
// The transport moves Frames: length-prefixed, deterministically CBOR-encoded
// messages (see EncodeFrame and DecodeFrame) of three kinds, one-way, request and
// response. TCPTransport keeps one persistent, write-batching connection per peer;
// InmemTransport on an InmemNetwork is its in-process twin for tests, with
// Disconnect, Partition and Heal to cut links. Both deliver at most once and in
// order per sender.
//
// A Messenger sits on a Transport and gives it topics (Handle, Tell) and
// request/response with deadlines (Request, RequestAsync); a remote handler's
// error comes back as a RemoteError wrapping ErrRemote.
package cluster
