package client_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/shardhost/shardhost/client"
	"github.com/shardhost/shardhost/cluster"
	"github.com/shardhost/shardhost/host"
	"github.com/shardhost/shardhost/sharding"
)

// jsonFields returns the JSON names of t's fields, embedded structs' included, with
// their kinds.
func jsonFields(t reflect.Type) map[string]reflect.Kind {
	out := map[string]reflect.Kind{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type.Kind()
	}
	return out
}

// TestTypesMatchTheAPIs: every field the client decodes is one the API's own type
// writes, under the same JSON name, so that a renamed field fails here rather than
// decode as zero. Kinds match too, except where the API's type marshals itself as
// text (a member's status and UID).
func TestTypesMatchTheAPIs(t *testing.T) {
	for _, c := range []struct {
		client, api any
		text        []string // fields the API writes as text through MarshalText
	}{
		{client.Member{}, cluster.Member{}, []string{"status", "uid"}},
		{client.TypeInfo{}, host.TypeInfo{}, nil},
		{client.MemberDeployment{}, host.MemberDeployment{}, nil},
		{client.Setting{}, host.Setting{}, nil},
		{client.DeployResult{}, host.DeployResult{}, nil},
		{client.UndeployResult{}, host.UndeployResult{}, nil},
		{client.ShardsReport{}, host.ShardsReport{}, nil},
		{client.RegionReport{}, host.RegionReport{}, nil},
		{client.ShardReport{}, host.ShardReport{}, nil},
		{client.EntityRow{}, sharding.EntityRow{}, nil},
		{client.EntityPage{}, sharding.EntityPage{}, nil},
		{client.EntityDescription{}, sharding.EntityDescription{}, nil},
	} {
		ct, at := reflect.TypeOf(c.client), reflect.TypeOf(c.api)
		api := jsonFields(at)
		for name, kind := range jsonFields(ct) {
			akind, ok := api[name]
			switch {
			case !ok:
				t.Errorf("%v has the JSON field %q, which %v does not write", ct, name, at)
			case akind != kind && !(kind == reflect.String && slices.Contains(c.text, name)):
				t.Errorf("%v.%s is a %v, %v's a %v", ct, name, kind, at, akind)
			}
		}
	}
}
