package shardhost

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestParseJSON(t *testing.T) {
	if n, err := ParseInt([]byte(" -42 ")); err != nil || n != -42 {
		t.Errorf("ParseInt: %d %v", n, err)
	}
	if n, err := ParseUint([]byte("18446744073709551615")); err != nil || n != 1<<64-1 {
		t.Errorf("ParseUint: %d %v", n, err)
	}
	if v, err := ParseBool([]byte("true")); err != nil || !v {
		t.Errorf("ParseBool: %v %v", v, err)
	}
	if s, ok, err := ParseString([]byte(`"a\"b\\\n\u00e9\ud83d\ude00/"`)); err != nil || !ok || s != "a\"b\\\né😀/" {
		t.Errorf("ParseString: %q %v %v", s, ok, err)
	}
	if s, ok, err := ParseString([]byte("null")); err != nil || ok || s != "" {
		t.Errorf("ParseString(null): %q %v %v", s, ok, err)
	}
	if ss, err := ParseStrings([]byte(`[ "a", "b c" ,""]`)); err != nil || !reflect.DeepEqual(ss, []string{"a", "b c", ""}) {
		t.Errorf("ParseStrings: %q %v", ss, err)
	}
	if ss, err := ParseStrings([]byte(`[]`)); err != nil || ss == nil || len(ss) != 0 {
		t.Errorf("ParseStrings([]): %q %v", ss, err)
	}
	if m, err := ParseStringMap([]byte(`{"k":"v","x y":"\t"}`)); err != nil || !reflect.DeepEqual(m, map[string]string{"k": "v", "x y": "\t"}) {
		t.Errorf("ParseStringMap: %q %v", m, err)
	}
	if m, err := ParseIntMap([]byte(`{"a":1,"b":-2}`)); err != nil || !reflect.DeepEqual(m, map[string]int64{"a": 1, "b": -2}) {
		t.Errorf("ParseIntMap: %v %v", m, err)
	}
	for _, bad := range []string{"", "1.5", "1 2", "--1", "x"} {
		if _, err := ParseInt([]byte(bad)); !errors.Is(err, ErrBadJSON) {
			t.Errorf("ParseInt(%q): %v", bad, err)
		}
	}
	for _, bad := range []string{"", "[", `["a",]`, `["a" "b"]`, `[1]`, `"a"`, `["\x"]`, `["a"] x`, "[\"\x01\"]"} {
		if _, err := ParseStrings([]byte(bad)); !errors.Is(err, ErrBadJSON) {
			t.Errorf("ParseStrings(%q): %v", bad, err)
		}
	}
	for _, bad := range []string{"{", `{"a"}`, `{"a":1}`, `{"a":"b",}`} {
		if _, err := ParseStringMap([]byte(bad)); !errors.Is(err, ErrBadJSON) {
			t.Errorf("ParseStringMap(%q): %v", bad, err)
		}
	}
	if _, err := ParseBool([]byte("True")); !errors.Is(err, ErrBadJSON) {
		t.Errorf("ParseBool(True): %v", err)
	}
}

// TestEncodeJSONMatchesEncodingJSON checks the encoder against encoding/json, and that
// the parser reads back what either writes.
func TestEncodeJSONMatchesEncodingJSON(t *testing.T) {
	ss := []string{"", "plain", "quote\" back\\slash", "nl\n tab\t cr\r", "ctl\x01\x1f", "é 😀", "<&>", "bad\xffutf8"}
	for _, s := range ss {
		got := AppendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("%q: %s does not parse: %v", s, got, err)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Errorf("%q: %q reads back as %q, encoding/json's as %q", s, got, back, wantBack)
		}
		p, ok, err := ParseString(want)
		if err != nil || !ok || p != wantBack {
			t.Errorf("ParseString(%s) = %q %v, want %q", want, p, err, wantBack)
		}
	}
	arr := EncodeStrings(ss)
	back, err := ParseStrings(arr)
	if err != nil || len(back) != len(ss) {
		t.Fatalf("round trip %s: %q %v", arr, back, err)
	}
	if string(EncodeStrings(nil)) != "[]" {
		t.Errorf("EncodeStrings(nil) = %s", EncodeStrings(nil))
	}
	m := map[string]string{"b": "2", "a": "1 \"x\""}
	if got := string(EncodeStringMap(m)); got != `{"a":"1 \"x\"","b":"2"}` {
		t.Errorf("EncodeStringMap = %s", got)
	}
	if mm, err := ParseStringMap(EncodeStringMap(m)); err != nil || !reflect.DeepEqual(mm, m) {
		t.Errorf("map round trip: %v %v", mm, err)
	}
}
