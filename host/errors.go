package host

import (
	"errors"

	"github.com/shardhost/shardhost/host/internal/wasmbin"
	"github.com/shardhost/shardhost/sharding"
)

// Errors of the host. Guest failures come as *GuestError, which matches ErrGuestTrap or
// ErrGuestDeadline with errors.Is; an entity's own refusal is an *EntityError.
var (
	// ErrInvalidModule: a module refused at deploy (malformed, or not an entity module
	// of abi/SPEC.md); the error says what is wrong. It is the module checks' own
	// (host/internal/wasmbin), so that their errors match it.
	ErrInvalidModule     = wasmbin.ErrInvalidModule
	ErrModuleTooLarge    = errors.New("host: module too large")
	ErrModuleUnavailable = errors.New("host: module unavailable")
	ErrShardsChanged     = errors.New("host: the number of shards of an entity type cannot change")
	ErrBadRequest        = errors.New("host: bad request")
	ErrMessageTooLarge   = errors.New("host: message too large")
	// ErrReplyTooLarge: the guest gave a reply over the cap (the message size cap for a
	// message, abi.MaxSnapshotSize for a snapshot). Only that call fails: the instance
	// and its state stay.
	ErrReplyTooLarge  = errors.New("host: reply too large")
	ErrGuestTrap      = errors.New("host: guest trapped")
	ErrGuestDeadline  = errors.New("host: guest exceeded its per-message deadline")
	ErrInstanceClosed = errors.New("host: instance closed")
	ErrRuntimeClosed  = errors.New("host: runtime closed")
	// ErrBadSnapshot: a saved entity state that does not decode, or does not fit the
	// module or runtime it is restored into (another module's, over the memory cap, a
	// guest-level state for a module without shardhost_restore, ...).
	ErrBadSnapshot = errors.New("host: bad snapshot")
	// ErrNotSnapshottable: the instance's state cannot be captured: a message is in
	// progress, or the module keeps state a snapshot cannot hold (a mutable reference or
	// v128 global).
	ErrNotSnapshottable = errors.New("host: instance cannot be snapshotted")
	// ErrSnapshotFailed: the guest's shardhost_snapshot or shardhost_restore refused
	// (status Error, with the guest's text) or gave a state over abi.MaxSnapshotSize.
	ErrSnapshotFailed = errors.New("host: guest snapshot failed")
	// ErrRestoreFailed: the guest's shardhost_restore refused the state it was given (a
	// module that cannot read the state another module saved, for one). It matches
	// ErrSnapshotFailed too.
	ErrRestoreFailed error = restoreFailed{}
	// ErrMigrationFailed: the guest's shardhost_migrate refused, or failed on, a state
	// another version of its module saved; the entity stays on that version.
	ErrMigrationFailed = errors.New("host: migration failed")
)

type restoreFailed struct{}

func (restoreFailed) Error() string        { return "host: guest restore failed" }
func (restoreFailed) Is(target error) bool { return target == ErrSnapshotFailed }

// ErrorCode implements sharding.CodedError.
func (e *EntityError) ErrorCode() string { return sharding.CodeEntityError }

// ErrorCode implements sharding.CodedError.
func (e *GuestError) ErrorCode() string {
	if errors.Is(e.Cause, ErrGuestDeadline) {
		return sharding.CodeGuestDeadline
	}
	return sharding.CodeGuestTrap
}

// codedError gives a host error a sharding error code, so that a caller on another
// member learns what kind of failure it was.
type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string     { return e.err.Error() }
func (e *codedError) Unwrap() error     { return e.err }
func (e *codedError) ErrorCode() string { return e.code }

// isGuestError reports whether err is (or wraps) a *GuestError. Nil costs nothing: the
// variable errors.As needs escapes to the heap, so it is made only for an error.
func isGuestError(err error) bool {
	if err == nil {
		return false
	}
	var ge *GuestError
	return errors.As(err, &ge)
}

// withCode returns err with the error code its kind has; nil stays nil.
func withCode(err error) error {
	if err == nil {
		return nil // before the variable errors.As needs, which escapes to the heap
	}
	var ce sharding.CodedError
	switch {
	case errors.As(err, &ce):
		return err
	case errors.Is(err, ErrReplyTooLarge):
		return &codedError{sharding.CodeReplyTooLarge, err}
	case errors.Is(err, ErrMessageTooLarge), errors.Is(err, ErrBadRequest), errors.Is(err, ErrCannotDeleteState):
		return &codedError{sharding.CodeBadRequest, err}
	case errors.Is(err, ErrModuleUnavailable), errors.Is(err, ErrInvalidModule),
		errors.Is(err, ErrBadSnapshot), errors.Is(err, ErrSnapshotFailed):
		return &codedError{sharding.CodeActivationError, err}
	case errors.Is(err, ErrRuntimeClosed), errors.Is(err, ErrInstanceClosed):
		return &codedError{sharding.CodeUnavailable, err}
	}
	return err
}
