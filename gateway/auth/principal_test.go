package auth

import (
	"context"
	"testing"
)

func TestPrincipal(t *testing.T) {
	acme := &Principal{Name: "acme", Role: Sender, Prefixes: []string{"acme:"}, Models: []string{"fast"}}
	viewer := &Principal{Name: "v", Role: Viewer, Sessions: []string{"bob"}}
	all := &Principal{Name: "root", Role: Admin, Prefixes: []string{""}}
	var none *Principal
	cases := []struct {
		name string
		got  bool
		want bool
	}{
		{"acme reaches acme:1", acme.AllowsSession("acme:1"), true},
		{"acme not globex:1", acme.AllowsSession("globex:1"), false},
		{"acme not the empty key", acme.AllowsSession(""), false},
		{"acme sends", acme.CanSend(), true},
		{"acme is no admin", acme.IsAdmin(), false},
		{"acme may name fast", acme.AllowsModel("fast"), true},
		{"acme may not name big", acme.AllowsModel("big"), false},
		{"acme may take the default", acme.AllowsModel(""), true},
		{"viewer reaches bob", viewer.AllowsSession("bob"), true},
		{"viewer not bobby", viewer.AllowsSession("bobby"), false},
		{"viewer does not send", viewer.CanSend(), false},
		{"viewer reads", viewer.CanRead(), true},
		{"admin reaches all", all.AllowsSession("x"), true},
		{"admin is admin", all.IsAdmin(), true},
		{"nil reads nothing", none.CanRead(), false},
		{"nil reaches nothing", none.AllowsSession("x"), false},
		{"nil names no model", none.AllowsModel(""), false},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	ctx := NewContext(context.Background(), acme)
	if FromContext(ctx) != acme || FromContext(context.Background()) != nil {
		t.Fatal("context does not carry the principal")
	}
}
