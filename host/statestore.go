package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/shardhost/shardhost/sharding"
	"github.com/shardhost/shardhost/sharding/pgstore"
	"github.com/shardhost/shardhost/sharding/replstore"
)

// StateStoreKind is the kind of entity state store a Config.StateStore names.
type StateStoreKind int

const (
	// StateStoreBuiltin is the replicated store on the members' disks.
	StateStoreBuiltin StateStoreKind = iota
	// StateStorePostgres is pgstore.
	StateStorePostgres
)

// ParseStateStore reads a --state-store value: "builtin" or "" (the built-in
// replicated store), or a PostgreSQL connection string: a postgres:// or
// postgresql:// URL, or libpq's key=value form (host=… dbname=…).
func ParseStateStore(v string) (StateStoreKind, error) {
	switch {
	case v == "" || v == "builtin":
		return StateStoreBuiltin, nil
	case strings.HasPrefix(v, "postgres://") || strings.HasPrefix(v, "postgresql://") || strings.Contains(v, "="):
		return StateStorePostgres, nil
	}
	return 0, &ConfigError{Field: "StateStore", Value: v,
		Err: errors.New("want builtin, or a PostgreSQL connection string (postgres://USER@HOST:PORT/DB?sslmode=…)")}
}

// openStateStore opens the store Config.StateStore names, and returns it with its
// Close.
func (n *Node) openStateStore(ctx context.Context) (sharding.StateStore, func() error, error) {
	kind, err := ParseStateStore(n.cfg.StateStore)
	if err != nil {
		return nil, nil, err
	}
	if kind == StateStorePostgres {
		pc := n.cfg.PostgresStateStore
		if pc.MaxConns == 0 { // a Config not made by DefaultConfig
			pc = pgstore.DefaultConfig()
		}
		pc.URL, pc.Logger = n.cfg.StateStore, n.cfg.Logger
		s, err := pgstore.Open(ctx, pc)
		if err != nil {
			return nil, nil, fmt.Errorf("host: opening the state store: %w", err)
		}
		return s, s.Close, nil
	}
	stc := n.cfg.BuiltinStateStore
	if stc.Replicas == 0 { // a Config not made by DefaultConfig
		stc = replstore.DefaultConfig()
	}
	stc.Membership, stc.Messenger, stc.Logger = n.membership, n.messenger, n.cfg.Logger
	stc.Dir = filepath.Join(n.cfg.DataDir, "state")
	s, err := replstore.New(stc)
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}
