// Package cluster holds what joins shardhost hosts into a cluster: membership
// (gossip on hashicorp/memberlist, the phi accrual failure detector, leader
// actions, downing and split brain resolution), and the node-to-node transport
// that everything above it uses to talk to other members.
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
