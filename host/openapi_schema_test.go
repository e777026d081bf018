package host

import (
	"bytes"
	"encoding"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/sharding"
)

// The schemas of openapi.json's components that come from Go types are written by
// reflection (openAPISchemaTypes): TestOpenAPISchemasMatchGoTypes fails when a type
// changed and the file did not; `go test ./host -run TestOpenAPISchemasMatchGoTypes
// -update-openapi` writes them again (docs/api.md).
var updateOpenAPI = flag.Bool("update-openapi", false, "write the Go types' schemas into openapi.json")

const openAPIFile = "openapi.json"

// openAPISchemaTypes are the JSON bodies of the API that are Go types, by schema name.
// The types they hold are named after their Go type (a clash fails the test).
var openAPISchemaTypes = map[string]any{
	"Error":                 apiError{},
	"DeployResult":          DeployResult{},
	"UndeployResult":        UndeployResult{},
	"UpgradeResult":         UpgradeResult{},
	"RolloutStatus":         RolloutStatus{},
	"TypeInfo":              TypeInfo{},
	"RollbackResult":        RollbackResult{},
	"TypeStatus":            TypeStatus{},
	"ModuleInfo":            ModuleInfo{},
	"EntityPage":            sharding.EntityPage{},
	"EntityDescription":     sharding.EntityDescription{},
	"HistoryPage":           HistoryPage{},
	"TimeTravelResult":      TimeTravelResult{},
	"EntityBase":            EntityBase{},
	"JournalPage":           JournalPage{},
	"EntityReminders":       EntityReminders{},
	"EntityLogLine":         EntityLogLine{},
	"Member":                cluster.Member{},
	"ShardsReport":          ShardsReport{},
	"View":                  cluster.View{},
	"ForgetResult":          ForgetResult{},
	"DDataEntry":            DDataEntry{},
	"KeyResponse":           cluster.KeyResponse{},
	"KeyRequest":            keyRequestBody{},
	"Readiness":             Readiness{},
	"ScheduledTellResult":   ScheduledTellResult{},
	"ScheduledList":         ScheduledList{},
	"ScheduledCancelResult": ScheduledCancelResult{},
}

// schemaReflector writes JSON Schemas (2020-12, as OpenAPI 3.1 takes them) of Go
// types as encoding/json marshals them: a field with omitempty is optional, a nil
// slice, map or pointer without it may be null, []byte is base64 text, a
// TextMarshaler is a string.
type schemaReflector struct {
	defs  map[string]any
	names map[string]reflect.Type
}

var textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
var jsonMarshaler = reflect.TypeFor[json.Marshaler]()

func (s *schemaReflector) ref(name string, t reflect.Type) (map[string]any, error) {
	if prev, ok := s.names[name]; ok {
		if prev != t {
			return nil, fmt.Errorf("two Go types named %s: %v and %v", name, prev, t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + name}, nil
	}
	s.names[name] = t
	s.defs[name] = nil // taken: a recursive type refers to itself
	def, err := s.object(t)
	if err != nil {
		return nil, err
	}
	s.defs[name] = def
	return map[string]any{"$ref": "#/components/schemas/" + name}, nil
}

// schema is t's schema; nullable says a nil value (slice, map, pointer) marshals as null.
func (s *schemaReflector) schema(t reflect.Type, nullable bool) (map[string]any, error) {
	orNull := func(m map[string]any) map[string]any {
		if !nullable {
			return m
		}
		if typ, ok := m["type"].(string); ok {
			m["type"] = []any{typ, "null"}
			return m
		}
		return map[string]any{"anyOf": []any{m, map[string]any{"type": "null"}}}
	}
	if t == reflect.TypeFor[time.Time]() {
		return map[string]any{"type": "string", "format": "date-time"}, nil
	}
	if t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) {
		return nil, fmt.Errorf("%v marshals itself (MarshalJSON): give it a schema by hand", t)
	}
	if t.Kind() != reflect.Pointer && (t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler)) {
		return map[string]any{"type": "string"}, nil
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.Interface:
		return map[string]any{}, nil // any JSON value
	case reflect.Pointer:
		m, err := s.schema(t.Elem(), false)
		if err != nil {
			return nil, err
		}
		return orNull(m), nil
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return orNull(map[string]any{"type": "string", "contentEncoding": "base64"}), nil
		}
		items, err := s.schema(t.Elem(), false)
		if err != nil {
			return nil, err
		}
		m := map[string]any{"type": "array", "items": items}
		if t.Kind() == reflect.Array {
			m["minItems"], m["maxItems"] = t.Len(), t.Len()
			return m, nil
		}
		return orNull(m), nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%v: a map's keys must be strings here", t)
		}
		values, err := s.schema(t.Elem(), false)
		if err != nil {
			return nil, err
		}
		return orNull(map[string]any{"type": "object", "additionalProperties": values}), nil
	case reflect.Struct:
		if t.Name() == "" {
			return s.object(t)
		}
		return s.ref(t.Name(), t)
	}
	return nil, fmt.Errorf("%v: no JSON schema for kind %v", t, t.Kind())
}

type reflectedField struct {
	name      string
	depth     int
	t         reflect.Type
	omitempty bool
	asString  bool
}

// fields lists t's JSON fields as encoding/json finds them (embedded structs' fields
// promoted, the shallower of two names kept).
func fields(t reflect.Type, depth int, out map[string][]reflectedField) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				fields(ft, depth+1, out)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		o := strings.Split(opts, ",")
		out[name] = append(out[name], reflectedField{name: name, depth: depth, t: ft,
			omitempty: slices.Contains(o, "omitempty") || slices.Contains(o, "omitzero"), asString: slices.Contains(o, "string")})
	}
}

func (s *schemaReflector) object(t reflect.Type) (map[string]any, error) {
	byName := map[string][]reflectedField{}
	fields(t, 0, byName)
	props := map[string]any{}
	var required []any
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fs := byName[name]
		slices.SortFunc(fs, func(a, b reflectedField) int { return a.depth - b.depth })
		if len(fs) > 1 && fs[0].depth == fs[1].depth {
			continue // ambiguous: encoding/json drops it
		}
		f := fs[0]
		var m map[string]any
		var err error
		if f.asString {
			m = map[string]any{"type": "string"}
		} else if m, err = s.schema(f.t, !f.omitempty); err != nil {
			return nil, fmt.Errorf("%v.%s: %w", t, name, err)
		}
		props[name] = m
		if !f.omitempty {
			required = append(required, name)
		}
	}
	m := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		m["required"] = required
	}
	return m, nil
}

// reflectedSchemas returns the schemas of openAPISchemaTypes and of the types they
// hold, by name.
func reflectedSchemas() (map[string]any, error) {
	s := &schemaReflector{defs: map[string]any{}, names: map[string]reflect.Type{}}
	for name, v := range openAPISchemaTypes {
		t := reflect.TypeOf(v)
		if _, err := s.ref(name, t); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return s.defs, nil
}

// openAPIOrder is the order of the document's top-level members and of its
// components' when the schemas are written again.
var openAPIOrder = []string{"openapi", "info", "servers", "security", "tags", "paths", "components",
	"securitySchemes", "parameters", "headers", "requestBodies", "responses", "schemas"}

// orderedJSON writes members (raw JSON values) in openAPIOrder, the others after them
// by name.
func orderedJSON(members map[string]json.RawMessage) ([]byte, error) {
	var keys []string
	for _, k := range openAPIOrder {
		if _, ok := members[k]; ok {
			keys = append(keys, k)
		}
	}
	var rest []string
	for k := range members {
		if !slices.Contains(openAPIOrder, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	keys = append(keys, rest...)
	var b bytes.Buffer
	b.WriteString("{")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(",")
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteString(":")
		b.Write(members[k])
	}
	b.WriteString("}")
	return b.Bytes(), nil
}

func TestOpenAPISchemasMatchGoTypes(t *testing.T) {
	want, err := reflectedSchemas()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", openAPIFile, err)
	}
	var components map[string]json.RawMessage
	if err := json.Unmarshal(doc["components"], &components); err != nil {
		t.Fatalf("%s components: %v", openAPIFile, err)
	}
	var schemas map[string]json.RawMessage
	if err := json.Unmarshal(components["schemas"], &schemas); err != nil {
		t.Fatalf("%s components.schemas: %v", openAPIFile, err)
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	slices.Sort(names)
	stale := false
	for _, name := range names {
		wb, _ := json.Marshal(want[name])
		var got any
		if err := json.Unmarshal(schemas[name], &got); err != nil || !jsonEqual(got, want[name]) {
			stale = true
			if !*updateOpenAPI {
				t.Errorf("components.schemas.%s of %s is not the schema of its Go type; run go test ./host -run TestOpenAPISchemasMatchGoTypes -update-openapi\n  want %s\n  have %s",
					name, openAPIFile, wb, schemas[name])
			}
		}
		schemas[name] = wb
	}
	if !stale || !*updateOpenAPI {
		return
	}
	if components["schemas"], err = json.Marshal(schemas); err != nil {
		t.Fatal(err)
	}
	if doc["components"], err = orderedJSON(components); err != nil {
		t.Fatal(err)
	}
	out, err := orderedJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	var indented bytes.Buffer
	if err := json.Indent(&indented, out, "", "  "); err != nil {
		t.Fatal(err)
	}
	indented.WriteString("\n")
	if err := os.WriteFile(openAPIFile, indented.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote the schemas of %d Go types into %s", len(names), openAPIFile)
}

// jsonEqual compares two values decoded from JSON (numbers compared as JSON text).
func jsonEqual(a, b any) bool {
	ab, err1 := json.Marshal(a)
	bb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}
