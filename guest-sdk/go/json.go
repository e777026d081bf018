package shardhost

import (
	"errors"
	"sort"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// The SDK reads the JSON values of distributed data (SPEC.md: a counter is a number, a
// set a sorted array of strings, a register a string or null, a flag a boolean, a map an
// object of its values) with a small parser of its own: encoding/json's reflection is
// too heavy for TinyGo.

// ErrBadJSON is returned by the Parse functions for text that is not the JSON value they
// read.
var ErrBadJSON = errors.New("shardhost: bad JSON value")

// ParseInt reads a JSON integer, such as a pncounter's value.
func ParseInt(b []byte) (int64, error) {
	p := jsonParser{b: b}
	s := p.number()
	if err := p.end(); err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, p.fail("an int64")
	}
	return n, nil
}

// ParseUint reads a non-negative JSON integer, such as a gcounter's value.
func ParseUint(b []byte) (uint64, error) {
	p := jsonParser{b: b}
	s := p.number()
	if err := p.end(); err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, p.fail("a uint64")
	}
	return n, nil
}

// ParseBool reads a JSON boolean, such as a flag's value.
func ParseBool(b []byte) (bool, error) {
	p := jsonParser{b: b}
	var v bool
	switch {
	case p.literal("true"):
		v = true
	case p.literal("false"):
	default:
		return false, p.fail("true or false")
	}
	return v, p.end()
}

// ParseString reads a JSON string, or null (ok false), such as a register's value.
func ParseString(b []byte) (s string, ok bool, err error) {
	p := jsonParser{b: b}
	if p.literal("null") {
		return "", false, p.end()
	}
	s = p.str()
	if err := p.end(); err != nil {
		return "", false, err
	}
	return s, true, nil
}

// ParseStrings reads a JSON array of strings, such as a set's value.
func ParseStrings(b []byte) ([]string, error) {
	p := jsonParser{b: b}
	out := []string{}
	p.expect('[')
	if !p.peekIs(']') {
		for p.err == nil {
			out = append(out, p.str())
			if !p.peekIs(',') {
				break
			}
			p.i++
		}
	}
	p.expect(']')
	if err := p.end(); err != nil {
		return nil, err
	}
	return out, nil
}

// ParseStringMap reads a JSON object of strings, such as an lwwmap's value.
func ParseStringMap(b []byte) (map[string]string, error) {
	return parseObject(b, (*jsonParser).str)
}

// ParseIntMap reads a JSON object of integers, such as a pncountermap's value.
func ParseIntMap(b []byte) (map[string]int64, error) {
	return parseObject(b, func(p *jsonParser) int64 {
		n, err := strconv.ParseInt(p.number(), 10, 64)
		if err != nil && p.err == nil {
			p.fail("an int64")
		}
		return n
	})
}

// parseObject reads a JSON object whose values value reads.
func parseObject[V any](b []byte, value func(*jsonParser) V) (map[string]V, error) {
	p := jsonParser{b: b}
	out := map[string]V{}
	p.expect('{')
	if !p.peekIs('}') {
		for p.err == nil {
			k := p.str()
			p.expect(':')
			out[k] = value(&p)
			if !p.peekIs(',') {
				break
			}
			p.i++
		}
	}
	p.expect('}')
	if err := p.end(); err != nil {
		return nil, err
	}
	return out, nil
}

// AppendJSONString appends s to dst as a JSON string.
func AppendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case c < 0x20 || c == 0x7f:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// EncodeStrings returns ss as a JSON array of strings ("[]" for none).
func EncodeStrings(ss []string) []byte {
	out := []byte{'['}
	for i, s := range ss {
		if i > 0 {
			out = append(out, ',')
		}
		out = AppendJSONString(out, s)
	}
	return append(out, ']')
}

// EncodeStringMap returns m as a JSON object with its keys sorted.
func EncodeStringMap(m map[string]string) []byte {
	out := []byte{'{'}
	for i, k := range sortedKeys(m) {
		if i > 0 {
			out = append(out, ',')
		}
		out = AppendJSONString(out, k)
		out = append(out, ':')
		out = AppendJSONString(out, m[k])
	}
	return append(out, '}')
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// jsonParser reads one JSON value; the first error sticks.
type jsonParser struct {
	b   []byte
	i   int
	err error
}

func (p *jsonParser) fail(want string) error {
	if p.err == nil {
		p.err = &jsonError{msg: ErrBadJSON.Error() + ": want " + want + " at offset " + strconv.Itoa(p.i) + " of " + quote(string(p.b))}
	}
	return p.err
}

// jsonError is an ErrBadJSON with the place it was found.
type jsonError struct{ msg string }

func (e *jsonError) Error() string        { return e.msg }
func (e *jsonError) Is(target error) bool { return target == ErrBadJSON }

func (p *jsonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peekIs skips space and reports whether the next byte is c.
func (p *jsonParser) peekIs(c byte) bool {
	if p.err != nil {
		return false
	}
	p.space()
	return p.i < len(p.b) && p.b[p.i] == c
}

func (p *jsonParser) expect(c byte) {
	if p.peekIs(c) {
		p.i++
		return
	}
	p.fail(strconv.QuoteRune(rune(c)))
}

func (p *jsonParser) literal(s string) bool {
	p.space()
	if p.err == nil && len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// end checks that only space follows the value.
func (p *jsonParser) end() error {
	if p.err != nil {
		return p.err
	}
	p.space()
	if p.i != len(p.b) {
		return p.fail("the end")
	}
	return nil
}

// number reads an integer's text (an optional minus and digits).
func (p *jsonParser) number() string {
	p.space()
	if p.err != nil {
		return ""
	}
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == digits {
		p.fail("an integer")
		return ""
	}
	return string(p.b[start:p.i])
}

// str reads a JSON string.
func (p *jsonParser) str() string {
	p.expect('"')
	if p.err != nil {
		return ""
	}
	start := p.i
	// The common case, no escapes: one allocation.
	for p.i < len(p.b) && p.b[p.i] != '"' && p.b[p.i] != '\\' && p.b[p.i] >= 0x20 {
		p.i++
	}
	if p.i < len(p.b) && p.b[p.i] == '"' {
		p.i++
		return string(p.b[start : p.i-1])
	}
	out := append([]byte(nil), p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out)
		case c < 0x20:
			p.fail("no control characters in a string")
			return ""
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		p.i++
		if p.i >= len(p.b) {
			break
		}
		e := p.b[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := p.hex4()
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if p.i+1 < len(p.b) && p.b[p.i] == '\\' && p.b[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					r2 = p.hex4()
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
					} else {
						p.i = save
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			if p.err != nil {
				return ""
			}
			out = utf8.AppendRune(out, r)
		default:
			p.i--
			p.fail("an escape")
			return ""
		}
	}
	p.fail("the closing quote")
	return ""
}

func (p *jsonParser) hex4() rune {
	if len(p.b)-p.i < 4 {
		p.fail("four hex digits")
		return 0
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			p.fail("four hex digits")
			return 0
		}
	}
	p.i += 4
	return r
}

// quote returns s in double quotes, as strconv.Quote does.
func quote(s string) string { return strconv.Quote(s) }
