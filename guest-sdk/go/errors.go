package shardhost

import (
	"errors"
	"strconv"
)

// Code is the result code of a v1 host function (abi.Code; SPEC.md, "v1: codes").
type Code int32

const (
	CodeOK           Code = 0  // done
	CodeError        Code = 1  // failed; the text says why
	CodeNotFound     Code = 2  // the ddata key does not exist
	CodeDeleted      Code = 3  // the ddata key was deleted
	CodeTimeout      Code = 4  // the ask or the consistency level was not answered in time
	CodeAskCycle     Code = 5  // the ask would deadlock
	CodeUnavailable  Code = 6  // the entity or replica cannot be reached now
	CodeBadRequest   Code = 7  // bad arguments
	CodeNotAllowed   Code = 8  // the function is not valid here
	CodeEntityError  Code = 9  // the asked entity answered with an error
	CodeTypeMismatch Code = 10 // the ddata key holds another type
)

var codeNames = [...]string{"ok", "error", "not found", "deleted", "timeout", "ask cycle",
	"unavailable", "bad request", "not allowed", "entity error", "type mismatch",
	"egress-denied", "egress-too-large", "egress-failed", "egress-rate-limited"}

// String returns the code's name, such as "timeout".
func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "code " + strconv.Itoa(int(c))
}

// HostError is the error of a v1 host function that returned a code other than CodeOK:
// the code and the text the host gave (for CodeEntityError, the asked entity's error
// text). errors.Is matches it against the sentinel of its code, so that
//
//	if errors.Is(err, shardhost.ErrTimeout) { ... }
//
// works whatever the text; errors.As gives the code and the text.
type HostError struct {
	Code Code
	Text string
}

// Error returns "shardhost: CODE: TEXT", or "shardhost: TEXT" when TEXT starts with "CODE:".
func (e *HostError) Error() string {
	if e.Text == "" {
		return "shardhost: " + e.Code.String()
	}
	if name := e.Code.String(); len(e.Text) > len(name) && e.Text[:len(name)+1] == name+":" {
		return "shardhost: " + e.Text // the host's text names the code already (egress-denied: ...)
	}
	return "shardhost: " + e.Code.String() + ": " + e.Text
}

// Is reports whether target is the sentinel of e's code.
func (e *HostError) Is(target error) bool {
	return target != nil && target == sentinel(e.Code)
}

// The sentinels HostError matches with errors.Is, one per code.
var (
	ErrHost         = errors.New("shardhost: host error")          // CodeError
	ErrNotFound     = errors.New("shardhost: not found")           // CodeNotFound
	ErrDeleted      = errors.New("shardhost: deleted")             // CodeDeleted
	ErrTimeout      = errors.New("shardhost: timeout")             // CodeTimeout
	ErrAskCycle     = errors.New("shardhost: ask cycle")           // CodeAskCycle
	ErrUnavailable  = errors.New("shardhost: unavailable")         // CodeUnavailable
	ErrBadRequest   = errors.New("shardhost: bad request")         // CodeBadRequest
	ErrNotAllowed   = errors.New("shardhost: not allowed here")    // CodeNotAllowed
	ErrEntityError  = errors.New("shardhost: entity error")        // CodeEntityError
	ErrTypeMismatch = errors.New("shardhost: ddata type mismatch") // CodeTypeMismatch

	ErrEgressDenied      = errors.New("shardhost: egress denied")       // CodeEgressDenied
	ErrEgressTooLarge    = errors.New("shardhost: egress too large")    // CodeEgressTooLarge
	ErrEgressFailed      = errors.New("shardhost: egress failed")       // CodeEgressFailed
	ErrEgressRateLimited = errors.New("shardhost: egress rate limited") // CodeEgressRateLimited
)

func sentinel(c Code) error {
	switch c {
	case CodeError:
		return ErrHost
	case CodeNotFound:
		return ErrNotFound
	case CodeDeleted:
		return ErrDeleted
	case CodeTimeout:
		return ErrTimeout
	case CodeAskCycle:
		return ErrAskCycle
	case CodeUnavailable:
		return ErrUnavailable
	case CodeBadRequest:
		return ErrBadRequest
	case CodeNotAllowed:
		return ErrNotAllowed
	case CodeEntityError:
		return ErrEntityError
	case CodeTypeMismatch:
		return ErrTypeMismatch
	case CodeEgressDenied:
		return ErrEgressDenied
	case CodeEgressTooLarge:
		return ErrEgressTooLarge
	case CodeEgressFailed:
		return ErrEgressFailed
	case CodeEgressRateLimited:
		return ErrEgressRateLimited
	}
	return nil
}

// codeError returns nil for CodeOK, otherwise a *HostError with the result as text.
func codeError(c Code, text []byte) error {
	if c == CodeOK {
		return nil
	}
	return &HostError{Code: c, Text: string(text)}
}

// errorCode returns the code an error stands for: a *HostError's own, CodeEntityError
// for any other error (nil gives CodeOK). The Harness uses it for the answers of a
// scripted ask.
func errorCode(err error) (Code, string) {
	if err == nil {
		return CodeOK, ""
	}
	var he *HostError
	if errors.As(err, &he) {
		return he.Code, he.Text
	}
	return CodeEntityError, err.Error()
}
