package cluster

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/shardhost/shardhost/internal/owner"
)

// SingletonService is a service the cluster runs exactly once. Start and Stop are
// called from the singleton's goroutine, one at a time; Stop must return once the
// service no longer acts (it hands over after that).
type SingletonService interface {
	Start()
	Stop()
}

// SingletonHost returns the member that should run a singleton (of role, "" for any):
// the oldest member (by up-number) whose status is up or leaving. A leaving member still
// holds the singleton until its leave hooks hand it over; an up member that crashed
// holds it until it is downed.
// One pass, without a copy of the members: every member evaluates it five times a
// second, and sharding once per shard home it asks for.
func SingletonHost(members []Member, role string) (Member, bool) {
	var oldest Member
	found := false
	for _, m := range members {
		if (m.Status == StatusUp || m.Status == StatusLeaving) && (role == "" || hasRole(m.Roles, role)) &&
			(!found || m.IsOlderThan(oldest)) {
			oldest, found = m, true
		}
	}
	return oldest, found
}

func hasRole(roles []string, role string) bool {
	for _, r := range roles {
		if r == role {
			return true
		}
	}
	return false
}

// SingletonMembership is what a Singleton needs of membership; *Membership has it.
type SingletonMembership interface {
	View() View
	Self() Member
	Subscribe(buffer int) *Subscription
	RegisterLeaveHook(LeaveHook)
}

// Singleton runs a service on the oldest up member (of a role) — Akka's cluster
// singleton. It starts the service only when every older member that could still run it
// is gone (exiting, down or removed), so there are never two instances while the
// membership protocol holds; it stops the service when this member leaves (before it
// exits: the hand-over), is downed or another member becomes the host.
type Singleton struct {
	m         SingletonMembership
	log       *slog.Logger
	role      string
	svc       SingletonService
	sub       *Subscription
	owner     *owner.Group // runs run; Close closes it and waits
	mu        sync.Mutex
	running   bool
	closed    bool
	closeOnce sync.Once
}

// NewSingleton starts following membership for svc. Close stops it (and the service).
// A nil log means slog.Default().
func NewSingleton(m SingletonMembership, role string, svc SingletonService, log *slog.Logger) *Singleton {
	if log == nil {
		log = slog.Default()
	}
	s := &Singleton{m: m, log: log, role: role, svc: svc, sub: m.Subscribe(256), owner: owner.New()}
	m.RegisterLeaveHook(func(ctx context.Context) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.setRunning(false) // hand over before exiting
		s.closed = true
		return nil
	})
	s.owner.Go(s.run)
	return s
}

func (s *Singleton) run() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		s.evaluate()
		select {
		case <-s.owner.Done():
			return
		case <-s.sub.C:
		case <-t.C:
		}
	}
}

// shouldRun reports whether this member should run the service now.
func (s *Singleton) shouldRun() bool {
	v := s.m.View()
	if v.Exited {
		return false
	}
	self := s.m.Self()
	if self.Status != StatusUp || (s.role != "" && !hasRole(self.Roles, s.role)) {
		return false
	}
	host, ok := SingletonHost(v.Members, s.role)
	return ok && host.Node() == self.Node()
}

func (s *Singleton) evaluate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.setRunning(s.shouldRun())
}

func (s *Singleton) setRunning(run bool) {
	if run == s.running {
		return
	}
	s.running = run
	if run {
		s.log.Info("singleton starting here", "role", s.role)
		s.svc.Start()
	} else {
		s.log.Info("singleton stopping here", "role", s.role)
		s.svc.Stop()
	}
}

// Running reports whether the service runs on this member.
func (s *Singleton) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}

// Close stops following membership and stops the service if it runs here. Idempotent.
func (s *Singleton) Close() {
	s.closeOnce.Do(func() {
		s.owner.Close()
		s.owner.Wait()
		s.mu.Lock()
		s.closed = true
		s.setRunning(false)
		s.mu.Unlock()
		s.sub.Close()
	})
}
