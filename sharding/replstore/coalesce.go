// The coalescing of journal writes. The writes of journal records and floors that this
// member sends a peer replica go through that replica's pipe, which sends what waits in
// it as state/writes requests, at most statePipeMaxInflight of them out at once: while
// they are out, the writes that come meanwhile wait, and leave together in the next.
// Alone, an append leaves at once; under load, a replica gets the appends of many
// entities (of any shard) in one message, serves them with one handler, and its writer
// commits them in one transaction and one fsync. A request does not wait for the
// replica's answer to the one before it (its fsync): the replica's writer takes what
// arrived meanwhile into its next commit. Each write keeps its own fence and its own
// reply; writes are versioned, so their order of arrival does not matter. No goroutine
// waits on a pipe: a write's sender, or the answer to a request, sends the next
// request, and each write's outcome goes to its callback. Reminder records (small
// snapshots and remember marks of sharding.ReminderIDPrefix IDs) go the same way;
// entities' snapshots, their remember marks and fences go as before, a state/write
// each.

package replstore

import (
	"fmt"

	"github.com/shardhost/shardhost/sharding"
)

// Bounds of a pipe.
const (
	// statePipeMaxBytes caps the record bytes waiting in one replica's pipe; a write
	// that finds it full fails for that replica (busy).
	statePipeMaxBytes = 16 << 20
	// statePipeMaxWrites caps the writes of one state/writes request.
	statePipeMaxWrites = 1024
	// statePipeMaxInflight caps the state/writes requests of one pipe out at once.
	statePipeMaxInflight = 4
)

// statePipeKey names a pipe: a peer replica, at its transport address, answering from
// the data directory it is expected to (stateReplica.store).
type statePipeKey struct{ addr, transport, store string }

// statePipe is a peer replica's pipe: the writes waiting, and how many requests are
// out (at most statePipeMaxInflight). It is in Store.pipes while either is not none.
// Guarded by Store.pipesMu.
type statePipe struct {
	rep   stateReplica
	queue []*statePipeWrite
	bytes int
	out   int
}

// statePipeWrite is a write waiting in a pipe, and where its outcome goes.
type statePipeWrite struct {
	req  *stateWriteReq
	size int
	done func(error)
}

// statePipeMaxRecord caps the data of a reminder record that goes through a pipe
// (coalescable): larger ones go alone, chunked if need be.
const statePipeMaxRecord = 64 << 10

// coalescable reports whether a write goes through the replica's pipe: one of journal
// records, floors, and reminder records (sharding.RecordReminders: snapshots of up to
// statePipeMaxRecord bytes and remember marks of sharding.ReminderIDPrefix IDs, written
// by the firings' write backs and by sets and cancels) alone.
func coalescable(req *stateWriteReq) bool {
	if len(req.Records) == 0 {
		return false
	}
	for i := range req.Records {
		r := &req.Records[i]
		if r.Xfer != 0 {
			return false
		}
		switch r.Kind {
		case stateKindJournal, stateKindFloor:
		case stateKindSnapshot, stateKindRemember:
			if !sharding.IsReminderID(r.ID) || len(r.Data) > statePipeMaxRecord {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// writePiped sends req to the peer replica r through its pipe and returns its outcome,
// as a state/write would give it. The wait is bounded by the requests ahead of it in
// the pipe, each by RequestTimeout.
func (s *Store) writePiped(r stateReplica, req *stateWriteReq) error {
	out := make(chan error, 1)
	s.queuePiped(r, req, func(err error) { out <- err })
	return <-out
}

// queuePiped queues req in the pipe of the peer replica r and returns; done gets its
// outcome, as a state/write would give it, once r answers the request that carries it
// (each within RequestTimeout), or sooner if it fails unsent. done is called once, from
// this goroutine or another (a transport's reader's, a timer's), and must not block.
func (s *Store) queuePiped(r stateReplica, req *stateWriteReq, done func(error)) {
	size := 0
	for i := range req.Records {
		size += len(req.Records[i].ID) + len(req.Records[i].Data) + 64
	}
	w := &statePipeWrite{req: req, size: size, done: done}
	key := statePipeKey{r.addr, r.transport, r.store}
	s.pipesMu.Lock()
	p := s.pipes[key]
	if p == nil {
		p = &statePipe{rep: r}
		s.pipes[key] = p
	}
	if len(p.queue) > 0 && p.bytes+size > statePipeMaxBytes {
		s.pipesMu.Unlock()
		done(fmt.Errorf("%w: replica %s: %w: %d bytes wait to be sent to it", sharding.ErrStoreUnavailable, r.addr, errStateBusy, p.bytes))
		return
	}
	p.queue = append(p.queue, w)
	p.bytes += size
	s.pumpPipe(key, p)
}

// pumpPipe sends the pipe's waiting writes, as many as one request carries
// (statePipeMaxWrites, stateMaxWriteRecords records, ChunkSize bytes; at least one
// write) a request, while fewer than statePipeMaxInflight are out, and forgets the
// pipe once nothing waits and nothing is out. Called with pipesMu held; returns with
// it released.
func (s *Store) pumpPipe(key statePipeKey, p *statePipe) {
	for len(p.queue) > 0 && p.out < statePipeMaxInflight {
		n, size, recs := 0, 0, 0
		for n < len(p.queue) && (n == 0 || (n < statePipeMaxWrites && size+p.queue[n].size <= s.cfg.ChunkSize &&
			recs+len(p.queue[n].req.Records) <= stateMaxWriteRecords)) {
			size += p.queue[n].size
			recs += len(p.queue[n].req.Records)
			n++
		}
		batch := p.queue[:n:n]
		p.queue = p.queue[n:]
		p.bytes -= size
		p.out++
		s.pipesMu.Unlock()
		s.sendPiped(key, p, batch)
		s.pipesMu.Lock()
	}
	if len(p.queue) == 0 && p.out == 0 && s.pipes[key] == p {
		delete(s.pipes, key)
	}
	s.pipesMu.Unlock()
}

// sendPiped sends a batch of a pipe's writes as one state/writes request, without
// waiting: its answer hands each write its outcome, then sends what waits meanwhile.
func (s *Store) sendPiped(key statePipeKey, p *statePipe, batch []*statePipeWrite) {
	answered := func(err error, reply *stateWritesReply) {
		if err == nil && len(reply.Results) != len(batch) {
			err = fmt.Errorf("%w: replica %s: bad reply: %d results for %d writes", sharding.ErrStoreUnavailable, p.rep.addr, len(reply.Results), len(batch))
		}
		for i, w := range batch {
			if err != nil {
				w.done(err)
				continue
			}
			w.done(stateCodeError(reply.Results[i].Code, reply.Results[i].Msg, p.rep.addr))
		}
		s.pipesMu.Lock()
		p.out--
		if s.owner.Closed() {
			// Nothing more leaves: what waits fails.
			queue := p.queue
			p.queue, p.bytes = nil, 0
			s.pipesMu.Unlock()
			for _, w := range queue {
				w.done(closedError())
			}
			s.pipesMu.Lock()
		}
		s.pumpPipe(key, p)
	}
	if s.owner.Closed() {
		answered(closedError(), nil)
		return
	}
	req := &stateWritesReq{Writes: make([]stateWriteReq, len(batch))}
	for i, w := range batch {
		req.Writes[i] = *w.req
	}
	reply := &stateWritesReply{}
	s.callAsync(p.rep, topicStateWrites, req, reply, func(err error) { answered(err, reply) })
}
