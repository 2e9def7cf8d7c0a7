package gateway

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/lanefleet/lanefleet/admin"
	"github.com/lanefleet/lanefleet/agents"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/gateway/route"
)

type openAPI struct {
	Paths      map[string]map[string]openAPIOp `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties           map[string]json.RawMessage `json:"properties"`
			AdditionalProperties *bool                      `json:"additionalProperties"`
		} `json:"schemas"`
	} `json:"components"`
}

type openAPIOp struct {
	Reach       string `json:"x-lanefleet-reach"`
	RequestBody *struct {
		Content map[string]struct {
			Schema struct {
				Ref string `json:"$ref"`
			} `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
}

var reachNames = map[route.Reach]string{route.Public: "public", route.Caller: "caller", route.Session: "session", route.SessionWrite: "session-write", route.Fleet: "fleet"}

// TestOpenAPIMatchesRoutes: the document kept in the repo (and served at
// /openapi.json) describes every native route, with its reach, and no
// route that does not exist; each request body's schema has exactly the
// fields its handler decodes (handlers refuse unknown fields, so the
// schema says additionalProperties: false).
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	var doc openAPI
	if err := json.Unmarshal(openAPIDoc, &doc); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Client: nil})
	if err == nil || s != nil {
		t.Fatal("New without a client")
	}
	srv := &Server{metrics: newMetrics()}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for m := range ops {
			documented[strings.ToUpper(m)+" "+path] = true
		}
	}
	for _, rt := range append(srv.nativeRoutes(), srv.budgetRoutes()...) {
		// A trailing wildcard {name...} is OpenAPI's {name}, its
		// description saying it may hold '/'.
		pattern := strings.ReplaceAll(rt.Pattern, "...}", "}")
		id := rt.Method + " " + pattern
		op, ok := doc.Paths[pattern][strings.ToLower(rt.Method)]
		if !ok {
			t.Errorf("%s is not in openapi.json", id)
			continue
		}
		delete(documented, id)
		if op.Reach != reachNames[rt.Reach] {
			t.Errorf("%s: openapi.json says reach %q, the route %q", id, op.Reach, reachNames[rt.Reach])
		}
	}
	for id := range documented {
		t.Errorf("openapi.json describes %s, which no route serves", id)
	}
	bodies := map[string]any{"SendRequest": SendRequest{}, "SettingsChange": SettingsChange{}, "Decision": Decision{},
		"DeadSelect": admin.DeadSelect{}, "ScheduleRequest": ScheduleRequest{}, "Image": events.Image{}, "ClientTool": events.ClientTool{}, "ToolResult": events.ToolResult{},
		"BudgetLimits": BudgetLimits{}, "Agent": agents.Agent{}}
	for name, v := range bodies {
		sch, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s missing", name)
			continue
		}
		var want, got []string
		for f := range reflect.TypeOf(v).Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if tag != "-" && tag != "" {
				want = append(want, tag)
			}
		}
		for p := range sch.Properties {
			got = append(got, p)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("schema %s has %v, the handler decodes %v", name, got, want)
		}
		if sch.AdditionalProperties == nil || *sch.AdditionalProperties {
			t.Errorf("schema %s must say additionalProperties: false", name)
		}
	}
}

// TestOpenAPIServed: /openapi.json answers anyone with the document.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{noFleet: true})
	resp := b.do(t, "", "GET", "/openapi.json", "")
	var doc map[string]any
	readJSON(t, resp, &doc)
	if resp.StatusCode != 200 || doc["openapi"] != "3.1.0" {
		t.Fatalf("%d %v", resp.StatusCode, doc["openapi"])
	}
}
