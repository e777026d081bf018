// The Store's requests to one replica (call, with the replier's store ID checked, and
// the reads and writes made of it), and how a request waits for a majority of the
// shard's replicas.

package replstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/shardhost/shardhost/internal/quorum"
	"github.com/shardhost/shardhost/sharding"
)

// majority is K/2+1 of K replicas.
func majority(replicas int) int { return replicas/2 + 1 }

// replicaAnswer is one replica's answer to a read (stateReadAnswer,
// stateRememberedAnswer).
type replicaAnswer interface {
	replica() stateReplica
	failure() error
}

func (a stateReadAnswer) replica() stateReplica { return a.rep }

func (a stateReadAnswer) failure() error { return a.err }

func (a stateRememberedAnswer) replica() stateReplica { return a.rep }

func (a stateRememberedAnswer) failure() error { return a.err }

// awaitMajority collects answers from results until a majority of each of the
// configurations of reps succeeded (quorum.AwaitJoint; one configuration in the steady
// state). It fails with sharding.ErrStoreUnavailable once that can no longer be, or
// when ctx ends first.
func awaitMajority[A replicaAnswer](ctx context.Context, reps stateReplicas, results <-chan A) ([]A, error) {
	in := func(a A) uint64 { return a.replica().in }
	answers, err := quorum.AwaitJoint(ctx, results, len(reps.reps), reps.groups(), in, A.failure)
	if err != nil {
		return nil, fmt.Errorf("%w: replicas: %w", sharding.ErrStoreUnavailable, err)
	}
	return answers, nil
}

// stragglers waits for the answers of the reachable replicas that have not answered yet
// (each answers or fails within RequestTimeout), until done; it returns them.
// Unreachable replicas are not waited for.
func stragglers[A replicaAnswer](reps []stateReplica, answered []A, results <-chan A, done <-chan struct{}) []A {
	seen := map[string]bool{}
	for _, a := range answered {
		seen[a.replica().addr] = true
	}
	missing := 0
	for _, r := range reps {
		if !seen[r.addr] && r.reachable {
			missing++
		}
	}
	var out []A
	for missing > 0 {
		select {
		case a := <-results:
			out = append(out, a)
			if a.replica().reachable {
				missing--
			}
		case <-done:
			return out
		}
	}
	return out
}

// answeredOK counts the answers without failure.
func answeredOK[A replicaAnswer](answers []A) int {
	n := 0
	for _, a := range answers {
		if a.failure() == nil {
			n++
		}
	}
	return n
}

// stateReplica is one member holding a replica of a shard.
type stateReplica struct {
	addr      string // the member's address: its identity in the ranking
	transport string // where its messenger listens
	local     bool   // this member
	reachable bool
	retained  bool   // a member gone (down, exiting, removed) that the ring still ranks
	in        uint64 // the configurations it belongs to (stateReplicas.sizes), a bit each
	// store is the store ID its answers must carry ("": any): the one the ring admitted
	// it with, or for a member joining the one it last answered with. An answer from
	// another data directory fails (noteStore).
	store string
}

// stateStatus is a reply: its code and message, and the replier's store ID.
type stateStatus interface {
	status() (uint8, string)
	store() *string
}

func (r *stateReply) status() (uint8, string) { return r.Code, r.Msg }

func (r *stateReadReply) status() (uint8, string) { return r.Code, r.Msg }

func (r *stateRememberedReply) status() (uint8, string) { return r.Code, r.Msg }

func (r *stateSummaryReply) status() (uint8, string) { return r.Code, r.Msg }

func (r *stateDiffReply) status() (uint8, string) { return r.Code, r.Msg }

func (r *stateHandoverReply) status() (uint8, string) { return r.Code, r.Msg }

func (r *stateForgetReply) status() (uint8, string) { return r.Code, r.Msg }

func (r *stateJournalReply) status() (uint8, string) { return r.Code, r.Msg }

func (r *stateWritesReply) status() (uint8, string) { return r.Code, r.Msg }

func (r *stateReply) store() *string { return &r.Store }

func (r *stateReadReply) store() *string { return &r.Store }

func (r *stateRememberedReply) store() *string { return &r.Store }

func (r *stateSummaryReply) store() *string { return &r.Store }

func (r *stateDiffReply) store() *string { return &r.Store }

func (r *stateHandoverReply) store() *string { return &r.Store }

func (r *stateForgetReply) store() *string { return &r.Store }

func (r *stateJournalReply) store() *string { return &r.Store }

func (r *stateWritesReply) store() *string { return &r.Store }

// storeID is this member's store ID (stateDisk.storeID; "" without a disk, in tests of
// the ranking alone).
func (s *Store) storeID() string {
	if s.disk == nil {
		return ""
	}
	return s.disk.storeID
}

// newFile reports whether the state file had taken no part in a cluster when the store
// opened it (stateDisk.created; true without a disk, in tests of the ranking alone).
func (s *Store) newFile() bool { return s.disk == nil || s.disk.created }

// encodeReply stamps a reply with this member's store ID and encodes it.
func (s *Store) encodeReply(r stateStatus) []byte {
	*r.store() = s.storeID()
	return encodeState(r)
}

// call sends a request to a peer replica, waits at most RequestTimeout (or parent) for
// the reply, and turns a reply's code into an error.
func (s *Store) call(parent context.Context, r stateReplica, topic string, req any, resp stateStatus) error {
	if r.retained {
		return fmt.Errorf("%w: replica %s is not up (retained until it returns or its shards are handed over)", sharding.ErrStoreUnavailable, r.addr)
	}
	if r.transport == "" {
		return fmt.Errorf("%w: replica %s has no transport address", sharding.ErrStoreUnavailable, r.addr)
	}
	ctx, cancel := context.WithTimeout(parent, s.cfg.RequestTimeout)
	defer cancel()
	body, err := s.cfg.Messenger.Request(ctx, r.transport, topic, encodeState(req))
	if err != nil {
		return fmt.Errorf("%w: replica %s: %v", sharding.ErrStoreUnavailable, r.addr, err)
	}
	if err := decodeState(body, resp); err != nil {
		return fmt.Errorf("%w: replica %s: bad reply: %v", sharding.ErrStoreUnavailable, r.addr, err)
	}
	if err := s.noteStore(r, *resp.store()); err != nil {
		return err
	}
	code, msg := resp.status()
	return stateCodeError(code, msg, r.addr)
}

// callAsync sends a request to a peer replica, as call does, without waiting: done gets
// the reply (reply's, decoded) or call's error once, from another goroutine (a
// transport's reader's, a timer's) or, for a replica that cannot be asked, this one.
// done must not block.
func (s *Store) callAsync(r stateReplica, topic string, req any, reply stateStatus, done func(error)) {
	switch {
	case r.retained:
		done(fmt.Errorf("%w: replica %s is not up (retained until it returns or its shards are handed over)", sharding.ErrStoreUnavailable, r.addr))
		return
	case r.transport == "":
		done(fmt.Errorf("%w: replica %s has no transport address", sharding.ErrStoreUnavailable, r.addr))
		return
	}
	s.cfg.Messenger.RequestAsyncContext(s.owner.Context(), r.transport, topic, encodeState(req), s.cfg.RequestTimeout, func(body []byte, err error) {
		if err != nil {
			done(fmt.Errorf("%w: replica %s: %v", sharding.ErrStoreUnavailable, r.addr, err))
			return
		}
		if err := decodeState(body, reply); err != nil {
			done(fmt.Errorf("%w: replica %s: bad reply: %v", sharding.ErrStoreUnavailable, r.addr, err))
			return
		}
		if err := s.noteStore(r, *reply.store()); err != nil {
			done(err)
			return
		}
		code, msg := reply.status()
		done(stateCodeError(code, msg, r.addr))
	})
}

// noteStore records the store ID an answer of replica r carried (got; "" from a member
// of a version that sends none) and checks it against the one r was asked as
// (stateReplica.store). An answer from another data directory fails with
// sharding.ErrStoreUnavailable: the replica the ring counted there is lost (a wiped
// disk), and the member's new one is joining until a handover round admits it
// (ring.go).
func (s *Store) noteStore(r stateReplica, got string) error {
	if got == "" {
		return nil
	}
	rg := &s.ring
	rg.mu.Lock()
	if rg.stores == nil {
		rg.stores = map[string]string{}
	}
	prev := rg.stores[r.addr]
	rg.stores[r.addr] = got
	rg.mu.Unlock()
	if r.store == "" || r.store == got {
		return nil
	}
	if prev != got {
		s.log.Warn("state store: a member answers from a new data directory: the replicas it held count as lost until a handover round admits its new one",
			"member", r.addr, "store", got, "admitted", r.store)
		select {
		case s.kick <- struct{}{}: // a repair pass and a handover round now
		default:
		}
	}
	return fmt.Errorf("%w: replica %s answered from another data directory (store %s, not %s): the replica it held is lost",
		sharding.ErrStoreUnavailable, r.addr, got, r.store)
}

// stateCodeError maps a reply code back to the error it stands for.
func stateCodeError(code uint8, msg, peer string) error {
	var sentinel error
	switch code {
	case stateCodeOK:
		return nil
	case stateCodeStale:
		sentinel = sharding.ErrStaleEpoch
	case stateCodeTooLarge:
		sentinel = sharding.ErrStateTooLarge
	case stateCodeBad:
		sentinel = sharding.ErrMalformedMessage
	case stateCodeChanged:
		sentinel = errStateChanged
	case stateCodeCorrupt:
		sentinel = sharding.ErrCorruptRecord
	default: // busy, failure, unknown codes
		sentinel = sharding.ErrStoreUnavailable
	}
	return fmt.Errorf("replica %s: %s: %w", peer, msg, sentinel)
}

// stateErrorCode is the reply code of an error.
func stateErrorCode(err error) uint8 {
	switch {
	case err == nil:
		return stateCodeOK
	case errors.Is(err, sharding.ErrStaleEpoch):
		return stateCodeStale
	case errors.Is(err, sharding.ErrStateTooLarge):
		return stateCodeTooLarge
	case errors.Is(err, sharding.ErrCorruptRecord):
		return stateCodeCorrupt
	case errors.Is(err, sharding.ErrMalformedMessage), errors.Is(err, sharding.ErrInvalidStateKey):
		return stateCodeBad
	case errors.Is(err, errStateChanged):
		return stateCodeChanged
	case errors.Is(err, errStateBusy):
		return stateCodeBusy
	default:
		return stateCodeFailure
	}
}

// stateFail is the reply body of a failed request, whatever its topic.
func stateFail(err error) []byte {
	return encodeState(&stateReply{Code: stateErrorCode(err), Msg: err.Error()})
}

// writeTo applies a write on one replica: on the local disk, or by a request (after
// staging, in chunks, the snapshots over ChunkSize); journal writes to a peer go
// through its pipe (coalesce.go).
func (s *Store) writeTo(ctx context.Context, r stateReplica, req *stateWriteReq) error {
	if r.local {
		_, err := s.disk.applyWrite(req)
		return err
	}
	if coalescable(req) && !r.retained && r.transport != "" {
		return s.writePiped(r, req)
	}
	out := req
	for i := range req.Records {
		if len(req.Records[i].Data) <= s.cfg.ChunkSize {
			continue
		}
		if out == req {
			cp := *req
			cp.Records = slices.Clone(req.Records)
			out = &cp
		}
		xfer, err := s.sendChunks(ctx, r, req.Records[i].Data)
		if err != nil {
			return err
		}
		out.Records[i].Data, out.Records[i].Xfer = nil, xfer
	}
	var reply stateReply
	return s.call(ctx, r, topicStateWrite, out, &reply)
}

// writeNow starts a write on one replica, as writeTo does, without a goroutine to wait
// for it where it can: on the local disk, when its writer's queue has room, and
// through a peer's pipe. done gets its outcome, as writeTo returns it, once, and must
// not block. It reports false, done not called, for a write writeTo must do.
func (s *Store) writeNow(r stateReplica, req *stateWriteReq, done func(error)) bool {
	switch {
	case r.local:
		return s.disk.tryWrite(req, func(_ uint64, err error) { done(err) })
	case coalescable(req) && !r.retained && r.transport != "":
		s.queuePiped(r, req, done)
		return true
	}
	return false
}

// sendChunks stages data on a peer replica, ChunkSize bytes a request, and returns the
// transfer's ID.
func (s *Store) sendChunks(ctx context.Context, r stateReplica, data []byte) (uint64, error) {
	xfer := rand.Uint64()
	for xfer == 0 {
		xfer = rand.Uint64()
	}
	for off := 0; off < len(data); off += s.cfg.ChunkSize {
		end := min(off+s.cfg.ChunkSize, len(data))
		var reply stateReply
		if err := s.call(ctx, r, topicStateChunk, &stateChunkReq{Xfer: xfer, Total: len(data), Offset: off, Data: data[off:end]}, &reply); err != nil {
			return 0, err
		}
	}
	return xfer, nil
}

// readFrom reads a snapshot's version and bytes (all of them locally, the first chunk
// from a peer).
func (s *Store) readFrom(ctx context.Context, r stateReplica, key sharding.EntityKey) stateReadAnswer {
	a := stateReadAnswer{rep: r}
	if r.local {
		a.ver, a.size, a.data, a.found, a.shard, a.gone, a.err = s.disk.readGone(stateShardPrefix(key.Type, key.Shard), key.ID, 0, math.MaxInt)
		return a
	}
	var reply stateReadReply
	if a.err = s.call(ctx, r, topicStateRead, &stateReadReq{Type: key.Type, Shard: key.Shard, ID: key.ID}, &reply); a.err != nil {
		return a
	}
	if reply.Found && (reply.Size < len(reply.Data) || reply.Size > s.cfg.MaxStateSize) {
		a.err = fmt.Errorf("%w: replica %s: bad read reply: %d of %d bytes", sharding.ErrStoreUnavailable, r.addr, len(reply.Data), reply.Size)
		return a
	}
	a.found, a.ver, a.size, a.data, a.shard = reply.Found, stateVersion{reply.Epoch, reply.Seq}, reply.Size, reply.Data, reply.Shard
	a.gone = stateVersion{reply.GoneEpoch, reply.GoneSeq}
	return a
}

// fetchRest completes a snapshot whose first chunk came from a peer, chunk by chunk,
// from the same peer; errStateChanged if the peer's version changed meanwhile.
func (s *Store) fetchRest(ctx context.Context, key sharding.EntityKey, a *stateReadAnswer) ([]byte, error) {
	data := a.data
	if data == nil {
		data = []byte{}
	}
	if len(data) >= a.size {
		return data, nil
	}
	data = append(make([]byte, 0, a.size), data...)
	for len(data) < a.size {
		var reply stateReadReply
		req := &stateReadReq{Type: key.Type, Shard: key.Shard, ID: key.ID, Offset: len(data), Epoch: a.ver.Epoch, Seq: a.ver.Seq}
		if err := s.call(ctx, a.rep, topicStateRead, req, &reply); err != nil {
			return nil, err
		}
		if !reply.Found || (stateVersion{reply.Epoch, reply.Seq}) != a.ver || reply.Size != a.size {
			return nil, fmt.Errorf("replica %s: %w", a.rep.addr, errStateChanged)
		}
		if len(reply.Data) == 0 || len(reply.Data) > a.size-len(data) {
			return nil, fmt.Errorf("%w: replica %s: bad read reply: %d bytes at offset %d of %d",
				sharding.ErrStoreUnavailable, a.rep.addr, len(reply.Data), len(data), a.size)
		}
		data = append(data, reply.Data...)
	}
	return data, nil
}

// rememberedFrom reads a shard's remember marks (tombstones included) from one replica:
// the local disk, or a peer page by page.
func (s *Store) rememberedFrom(ctx context.Context, r stateReplica, typ string, shard int) ([]stateRecord, error) {
	prefix := stateShardPrefix(typ, shard)
	if r.local {
		recs, _, err := s.disk.rememberedPage(prefix, "", int(^uint(0)>>1), int(^uint(0)>>1))
		return recs, err
	}
	var out []stateRecord
	after := ""
	for {
		var reply stateRememberedReply
		if err := s.call(ctx, r, topicStateRemembered, &stateRememberedReq{Type: typ, Shard: shard, After: after}, &reply); err != nil {
			return nil, err
		}
		for _, rec := range reply.Records {
			// IDs must ascend: a peer cannot make us loop.
			if rec.Kind != stateKindRemember || rec.ID <= after || len(rec.ID) > sharding.MaxStateIDLen {
				return nil, fmt.Errorf("%w: replica %s: bad remembered page (record %q after %q)", sharding.ErrStoreUnavailable, r.addr, rec.ID, after)
			}
			after = rec.ID
			out = append(out, stateRecord{Kind: stateKindRemember, ID: rec.ID, Epoch: rec.Epoch, Seq: rec.Seq, Remember: rec.Remember})
		}
		if !reply.More {
			return out, nil
		}
		if len(reply.Records) == 0 {
			return nil, fmt.Errorf("%w: replica %s: bad remembered page (more, but empty)", sharding.ErrStoreUnavailable, r.addr)
		}
	}
}
