package main

import (
	"cmp"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet"
	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/lanes/sessionsvc"
)

// TestJSONOutputIsCamelCase: every type the commands print as JSON names
// its fields in camelCase, as the events do (sessions, backlog, auth status
// and dlq show printed PascalCase while runs, settings and the events used
// camelCase).
func TestJSONOutputIsCamelCase(t *testing.T) {
	t.Parallel()
	camel := regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
	seen := map[reflect.Type]bool{}
	var walk func(path string, ty reflect.Type)
	walk = func(path string, ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		for i := range ty.NumField() {
			f := ty.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if !camel.MatchString(name) {
				t.Errorf("%s.%s prints as %q: want a camelCase json tag", path, f.Name, cmp.Or(name, f.Name))
			}
			walk(path+"."+f.Name, f.Type)
		}
	}
	for _, v := range []any{admin.SessionsReply{}, admin.DeadListReply{}, admin.DeadLetter{}, admin.DeadReplayReply{},
		admin.DeadPurgeReply{}, admin.AuthStatusReply{}, admin.AuthResetReply{}, sessionsvc.BacklogReply{}, lanefleet.ActiveRun{}} {
		ty := reflect.TypeOf(v)
		walk(ty.String(), ty)
	}
}
