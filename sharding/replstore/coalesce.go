// The coalescing of journal writes. The writes of journal records and floors that this
// member sends a peer replica go through that replica's pipe, which sends what waits in
// it as state/writes requests, at most statePipeMaxInflight of them out at once: while
// they are out, the writes that come meanwhile wait, and leave together in the next.
// Alone, an append leaves at once; under load, a replica gets the appends of many
// entities (of any shard) in one message, serves them with one handler, and its writer
// commits them in one transaction and one fsync. A request does not wait for the
// replica's answer to the one before it (its fsync): the replica's writer takes what
// arrived meanwhile into its next commit. Each write keeps its own fence and its own
// reply; writes are versioned, so their order of arrival does not matter. Snapshots,
// remember marks and fences go as before, a state/write each.

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

// statePipe is a peer replica's pipe: the writes waiting, and the goroutines that send
// them (senders, at most statePipeMaxInflight; each exits when none waits), of which
// busy wait for a replica's answer. Guarded by Store.pipesMu.
type statePipe struct {
	rep     stateReplica
	queue   []*statePipeWrite
	bytes   int
	senders int
	busy    int
}

// statePipeWrite is a write waiting in a pipe, and where its outcome goes.
type statePipeWrite struct {
	req  *stateWriteReq
	size int
	done chan error
}

// coalescable reports whether a write goes through the replica's pipe: one of journal
// records and floors alone.
func coalescable(req *stateWriteReq) bool {
	if len(req.Records) == 0 {
		return false
	}
	for i := range req.Records {
		if r := &req.Records[i]; (r.Kind != stateKindJournal && r.Kind != stateKindFloor) || r.Xfer != 0 {
			return false
		}
	}
	return true
}

// writePiped sends req to the peer replica r through its pipe and returns its outcome,
// as a state/write would give it. The wait is bounded by the requests ahead of it in
// the pipe, each by RequestTimeout.
func (s *Store) writePiped(r stateReplica, req *stateWriteReq) error {
	size := 0
	for i := range req.Records {
		size += len(req.Records[i].ID) + len(req.Records[i].Data) + 64
	}
	w := &statePipeWrite{req: req, size: size, done: make(chan error, 1)}
	key := statePipeKey{r.addr, r.transport, r.store}
	s.pipesMu.Lock()
	p := s.pipes[key]
	if p == nil {
		p = &statePipe{rep: r}
		s.pipes[key] = p
	}
	if len(p.queue) > 0 && p.bytes+size > statePipeMaxBytes {
		s.pipesMu.Unlock()
		return fmt.Errorf("%w: replica %s: %w: %d bytes wait to be sent to it", sharding.ErrStoreUnavailable, r.addr, errStateBusy, p.bytes)
	}
	p.queue = append(p.queue, w)
	p.bytes += size
	// A sender more when every one is waiting for an answer: the write leaves now
	// rather than after the replica's fsync of the requests out.
	start := p.senders == p.busy && p.senders < statePipeMaxInflight
	if start {
		p.senders++
	}
	s.pipesMu.Unlock()
	if start && !s.owner.Go(func() { s.runPipe(key, p) }) {
		s.failPipe(key, p, closedError())
	}
	return <-w.done
}

// runPipe is one of a pipe's senders: it sends the pipe's writes, as many as one
// request carries (statePipeMaxWrites, stateMaxWriteRecords records, ChunkSize bytes;
// at least one write) at a time, until none waits.
func (s *Store) runPipe(key statePipeKey, p *statePipe) {
	for {
		s.pipesMu.Lock()
		if len(p.queue) == 0 {
			p.senders--
			if p.senders == 0 && s.pipes[key] == p {
				delete(s.pipes, key)
			}
			s.pipesMu.Unlock()
			return
		}
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
		p.busy++
		s.pipesMu.Unlock()

		req := &stateWritesReq{Writes: make([]stateWriteReq, n)}
		for i, w := range batch {
			req.Writes[i] = *w.req
		}
		var reply stateWritesReply
		err := s.call(s.owner.Context(), p.rep, topicStateWrites, req, &reply)
		if err == nil && len(reply.Results) != n {
			err = fmt.Errorf("%w: replica %s: bad reply: %d results for %d writes", sharding.ErrStoreUnavailable, p.rep.addr, len(reply.Results), n)
		}
		s.pipesMu.Lock()
		p.busy--
		s.pipesMu.Unlock()
		for i, w := range batch {
			if err != nil {
				w.done <- err
				continue
			}
			w.done <- stateCodeError(reply.Results[i].Code, reply.Results[i].Msg, p.rep.addr)
		}
	}
}

// failPipe fails every write waiting in a pipe whose sender could not start (the store
// is closing).
func (s *Store) failPipe(key statePipeKey, p *statePipe, err error) {
	s.pipesMu.Lock()
	queue := p.queue
	p.queue, p.bytes = nil, 0
	p.senders--
	if p.senders == 0 && s.pipes[key] == p {
		delete(s.pipes, key)
	}
	s.pipesMu.Unlock()
	for _, w := range queue {
		w.done <- err
	}
}
