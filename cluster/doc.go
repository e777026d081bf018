// Package cluster holds what joins shardhost hosts into a cluster: membership (gossip
// on hashicorp/memberlist: who is a member, with what address, UID and status), and the
// node-to-node transport that everything above it uses to talk to other members. The
// full membership lifecycle of the cluster specification (convergence, the leader, phi
// accrual, downing and split brain resolution) builds on Membership; it is not here yet.
//
// Membership carries each member's UID, transport and API addresses in memberlist's
// node metadata, lets upper layers share small state through push-pull and broadcasts
// (StateDelegate), and reports MemberUp and MemberRemoved through non-blocking
// subscriptions. InmemGossipNetwork is memberlist's transport without sockets, for tests.
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
