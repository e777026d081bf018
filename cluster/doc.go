// Package cluster joins shardhost hosts into a cluster: membership with the lifecycle
// of Akka's cluster specification, the cluster singleton, and the node-to-node
// transport that every layer above uses to talk to other members. The design and its
// vocabulary are in docs/design.md.
//
// Core is the membership protocol as a pure state machine: the gossiped membership
// state (a CRDT of members, statuses, a vector clock, a seen set and reachability),
// convergence, the leader's actions on convergence (joining → up, exiting → removed),
// phi accrual failure detection of up to 5 neighbours on a hashed ring, and the split
// brain resolver (keep-majority, static-quorum, keep-oldest, down-all), the only way
// besides an operator that a member becomes down. Core never reads a clock: it is
// driven by Tick(now) and Step(message) and returns what to send, and the tests run
// several Cores on a simulated clock (sim_test.go).
//
// Membership runs one Core on one goroutine and carries its messages over
// hashicorp/memberlist (streams for state, datagrams for heartbeats, push-pull for
// anti-entropy, the keyring for encryption, optionally mutual TLS for all of it). It
// publishes the current View, reports lifecycle events to non-blocking subscriptions,
// runs leave hooks before a leaving member exits, and lets upper layers share small
// state through push-pull and broadcasts. Singleton runs a service on the oldest up
// member (of a role) and moves it when that member leaves or fails.
//
// The transport moves Frames: length-prefixed, deterministically CBOR-encoded messages
// of three kinds, one-way, request and response. TCPTransport keeps one persistent,
// write-batching connection per peer; InmemTransport on an InmemNetwork is its
// in-process twin for tests. Both deliver at most once and in order per sender. A
// Messenger sits on a Transport and gives it topics and request/response with
// deadlines.
//
// The package's goroutines (membership's loop and sends, the transports' readers and
// writers, the singleton's loop) are each owned by an internal/owner Group that their
// Close or Shutdown closes and waits for.
//
// # What an embedder uses
//
// A member: NewMembership with a MembershipConfig (DefaultMembershipConfig; Lifecycle
// is a CoreConfig from DefaultCoreConfig or, for tests and one machine,
// DefaultLocalCoreConfig, with a PhiAccrualConfig from DefaultPhiAccrualConfig and an
// SBRStrategy: KeepMajority, StaticQuorum, KeepOldest or DownAll, ParseSBRStrategy
// reading one) returns a Membership. Its View lists each Member (a UniqueAddress: the
// address and UID of one incarnation; a MemberStatus: StatusJoining, StatusUp,
// StatusLeaving, StatusExiting, StatusDown, StatusRemoved), and Oldest picks the
// oldest of them. A Subscription delivers each MemberEvent, whose EventKind is
// MemberJoined, MemberUp, MemberLeft, MemberExited, MemberDowned, MemberRemoved,
// UnreachableMember, ReachableMember, LeaderChanged, ConvergenceChanged or SelfExited;
// an exit's reason is ReasonLeft, ReasonDowned or ReasonRemoved. A StateDelegate shares
// a layer's state through gossip; a LeaveHook runs as the member leaves. A member's stable name (Member.Name, checked by
// CheckMemberName) survives its restarts at other addresses. Errors: ErrJoinFailed,
// ErrMembershipClosed, ErrExited, ErrNoSuchMember, ErrBadGossipKey, ErrBadMemberName.
//
// The cluster singleton: NewSingleton runs a SingletonService on the member that
// SingletonHost names, following a SingletonMembership (a Membership has one); a
// Singleton says where it runs.
//
// Gossip keys: NewKeyManager with a KeyManagerConfig returns a KeyManager, whose
// operations across the cluster answer a KeyResponse naming keys by KeyID; ErrNoKeyring
// when gossip is not encrypted.
//
// Node-to-node messages: NewMessenger (options WithTracing and WithMetrics, each a
// MessengerOption) builds a Messenger on a Transport: NewTCPTransport with a TCPConfig
// (DefaultTCPConfig; DefaultLocalTCPConfig for tests and one machine) makes a
// TCPTransport. A Handler serves a topic and answers each Request. Errors:
// ErrTransportClosed, ErrQueueFull, ErrUnreachable, ErrFrameTooLarge, ErrMalformedFrame,
// ErrRequestTimeout, ErrRemote (a remote handler's error), ErrInvalidTransportConfig;
// ErrNotSent marks a request that never left this member, so that its peer cannot have
// handled it.
// Another Transport moves each Frame (its FrameKind: FrameOneWay, FrameRequest,
// FrameResponse) to the FrameHandler at the other end, encoded by EncodeFrame and
// decoded by DecodeFrame within DefaultMaxFrameSize, and may count TransportStats.
//
// Membership over another carrier: a Core from NewCore, fed with Tick and Step,
// returns each Outbound Message, which EncodeMessage and DecodeMessage carry.
//
// In-memory twins, for tests: NewInmemNetwork returns an InmemNetwork of InmemTransport
// (InmemFaults lose, duplicate, reorder and delay frames), and NewInmemGossipNetwork an
// InmemGossipNetwork of InmemGossipTransport for memberlist; the package
// cluster/clustertest builds whole members and clusters on them.
package cluster
