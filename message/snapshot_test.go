package message

import (
	"reflect"
	"testing"
)

// snapBase is a message with every field set, blocks of every kind.
func snapBase() Message {
	return Message{Role: RoleAssistant, API: "a", Provider: "p", Model: "m", StopReason: StopToolUse, ErrorMessage: "e",
		ToolCallID: "c", ToolName: "t", Details: map[string]any{"k": 1.0}, IsError: true, Timestamp: 7,
		Usage: &Usage{Input: 1, Output: 2, Extra: map[string]any{"u": 1.0}}, Extra: map[string]any{"x": 1.0},
		Content: BlocksOf(Block{Type: BlockToolCall, Text: "t", TextSignature: "ts", Thinking: "th", ThinkingSignature: "s",
			Redacted: true, Data: "d", MimeType: "mt", ID: "i", Name: "n", Arguments: map[string]any{"a": 1.0},
			ThoughtSignature: "o", Extra: map[string]any{"b": 1.0}}, Text("second"))}
}

// changed returns a copy of v with its field i set to another value of
// its type (a new map for maps, so identity differs).
func changed(t *testing.T, v reflect.Value, i int) {
	t.Helper()
	f := v.Field(i)
	switch f.Kind() {
	case reflect.String:
		f.SetString(f.String() + "!")
	case reflect.Bool:
		f.SetBool(!f.Bool())
	case reflect.Int64, reflect.Int:
		f.SetInt(f.Int() + 1)
	case reflect.Map:
		f.Set(reflect.ValueOf(map[string]any{"k": 1.0}))
	case reflect.Interface:
		f.Set(reflect.ValueOf(map[string]any{"k": 1.0}))
	default:
		t.Fatalf("field %s of kind %s: teach the test (and Same) about it", v.Type().Field(i).Name, f.Kind())
	}
}

// TestSnapshotSeesEveryField: a snapshot is the same as its message, and
// stops being so when any field of the message, of a block (rewritten in
// place in the message's own block list) or of its usage changes.
func TestSnapshotSeesEveryField(t *testing.T) {
	m := snapBase()
	s := Snap(&m)
	if !s.Same(&m) {
		t.Fatal("a snapshot is not the same as its message")
	}
	mt := reflect.TypeOf(m)
	for i := range mt.NumField() {
		name := mt.Field(i).Name
		switch name {
		case "Content", "Usage":
			continue // below
		}
		m := snapBase()
		s := Snap(&m)
		changed(t, reflect.ValueOf(&m).Elem(), i)
		if s.Same(&m) {
			t.Errorf("Message.%s changed: still the same", name)
		}
	}
	bt := reflect.TypeOf(Block{})
	for i := range bt.NumField() {
		m := snapBase()
		s := Snap(&m)
		changed(t, reflect.ValueOf(&m.Content.Blocks[0]).Elem(), i) // in place
		if s.Same(&m) {
			t.Errorf("Block.%s changed in place: still the same", bt.Field(i).Name)
		}
	}
	ut := reflect.TypeOf(Usage{})
	for i := range ut.NumField() {
		if ut.Field(i).Name == "Cost" {
			continue
		}
		m := snapBase()
		s := Snap(&m)
		changed(t, reflect.ValueOf(m.Usage).Elem(), i) // in place
		if s.Same(&m) {
			t.Errorf("Usage.%s changed in place: still the same", ut.Field(i).Name)
		}
	}
	cases := map[string]func(m *Message){
		"content replaced":  func(m *Message) { m.Content = BlocksOf(Text("t"), Text("second")) },
		"plain":             func(m *Message) { m.Content = PlainText("x") },
		"block dropped":     func(m *Message) { m.Content.Blocks = m.Content.Blocks[:1] },
		"blocks nil":        func(m *Message) { m.Content.Blocks = nil },
		"usage removed":     func(m *Message) { m.Usage = nil },
		"cost changed":      func(m *Message) { m.Usage.Cost.Total = 1 },
		"details a string":  func(m *Message) { m.Details = "x" },
		"arguments rebuilt": func(m *Message) { m.Content.Blocks[0].Arguments = map[string]any{"a": 1.0} },
	}
	for name, change := range cases {
		m := snapBase()
		s := Snap(&m)
		change(&m)
		if s.Same(&m) {
			t.Errorf("%s: still the same", name)
		}
	}
	// The same content in other strings and a copy of the block list is
	// the same message.
	m2 := snapBase()
	m2.Details, m2.Extra = m.Details, m.Extra
	m2.Content.Blocks[0].Arguments, m2.Content.Blocks[0].Extra = m.Content.Blocks[0].Arguments, m.Content.Blocks[0].Extra
	m2.Usage.Extra = m.Usage.Extra
	if !s.Same(&m2) {
		t.Error("an equal message with the same maps is not the same")
	}
}

func TestSnapshotDetailsScalars(t *testing.T) {
	for _, d := range []any{nil, "s", 1.5, int64(2), 3, true} {
		m := Message{Role: RoleToolResult, Details: d}
		s := Snap(&m)
		if !s.Same(&m) {
			t.Errorf("details %#v: not the same", d)
		}
	}
	m := Message{Role: RoleToolResult, Details: []any{1.0}}
	s := Snap(&m)
	if !s.Same(&m) {
		t.Error("the very message with a details of another kind is not the same")
	}
	m.Details = []any{1.0}
	if s.Same(&m) {
		t.Error("another details of another kind is found the same")
	}
}

func TestMatch(t *testing.T) {
	msgs := make([]Message, 10)
	for i := range msgs {
		msgs[i] = User(string(rune('a'+i)), int64(i))
	}
	snaps := make([]Snapshot, 6)
	for i := range snaps {
		snaps[i] = Snap(&msgs[i])
	}
	changed := append([]Message(nil), msgs...)
	changed[3] = User("x", 3)
	cases := []struct {
		name      string
		msgs      []Message
		off, same int
	}{
		{"grown", msgs, 0, 6},
		{"same", msgs[:6], 0, 6},
		{"shorter", msgs[:4], 0, 4},
		{"front dropped", msgs[2:], 2, 4},
		{"changed inside", changed, 0, 3},
		{"front dropped, changed inside", changed[1:], 1, 2},
		{"unknown front", msgs[7:], 0, 0},
		{"empty", nil, 0, 0},
	}
	for _, c := range cases {
		if off, same := Match(snaps, c.msgs); off != c.off || same != c.same {
			t.Errorf("%s: Match = %d, %d; want %d, %d", c.name, off, same, c.off, c.same)
		}
	}
	if off, same := Match(nil, msgs); off != 0 || same != 0 {
		t.Errorf("no snapshots: Match = %d, %d", off, same)
	}
}

// TestSnapshotsUpdate: the snapshots follow the lists they are updated
// with, and count the bytes of the block lists they hold.
func TestSnapshotsUpdate(t *testing.T) {
	msgs := make([]Message, 20)
	for i := range msgs {
		msgs[i] = Message{Role: RoleAssistant, Content: BlocksOf([]Block{Text("a"), Text(string(rune('a' + i)))}[:1+i%2]...)}
	}
	steps := []struct {
		msgs      []Message
		off, same int
	}{
		{msgs[:5], 0, 0}, {msgs[:10], 0, 5}, {msgs[3:12], 3, 7}, {msgs[5:8], 2, 3}, {msgs[15:], 0, 0}, {nil, 0, 0}, {msgs, 0, 0},
	}
	var ss Snapshots
	for i, st := range steps {
		off, same := ss.Update(st.msgs)
		if off != st.off || same != st.same {
			t.Errorf("step %d: Update = %d, %d; want %d, %d", i, off, same, st.off, st.same)
		}
		want := 0
		for j := range ss.s {
			if !ss.s[j].Same(&st.msgs[j]) {
				t.Fatalf("step %d: snapshot %d is not of message %d", i, j, j)
			}
			want += ss.s[j].Bytes()
		}
		if ss.Len() != len(st.msgs) || ss.bytes != want {
			t.Fatalf("step %d: %d snapshots counting %d bytes, want %d, %d", i, ss.Len(), ss.bytes, len(st.msgs), want)
		}
	}
	ss.Reset()
	if ss.Len() != 0 || ss.bytes != 0 {
		t.Error("Reset left snapshots")
	}
}

// TestSnapshotsUpdateKnown: a list known to start with the last one's
// messages lines up as Update lines it up, compares only the messages
// after the known ones (a change there is seen), and a known count beyond
// either list is ignored.
func TestSnapshotsUpdateKnown(t *testing.T) {
	msgs := make([]Message, 12)
	for i := range msgs {
		msgs[i] = Message{Role: RoleUser, Content: BlocksOf(Text(string(rune('a' + i))))}
	}
	var ss Snapshots
	ss.Update(msgs[:6])
	grown := append(msgs[:6:6], msgs[6:9]...)
	if off, same := ss.UpdateKnown(grown, 6); off != 0 || same != 6 {
		t.Fatalf("grown: UpdateKnown = %d, %d; want 0, 6", off, same)
	}
	changed := append(msgs[:9:9], msgs[9:]...)
	changed[7] = Message{Role: RoleUser, Content: BlocksOf(Text("changed"))}
	if off, same := ss.UpdateKnown(changed, 6); off != 0 || same != 7 {
		t.Fatalf("changed after the known: UpdateKnown = %d, %d; want 0, 7", off, same)
	}
	for j := range ss.s {
		if !ss.s[j].Same(&changed[j]) {
			t.Fatalf("snapshot %d is not of message %d", j, j)
		}
	}
	if off, same := ss.UpdateKnown(msgs[:3], 5); off != 0 || same != 3 {
		t.Fatalf("known beyond the list: UpdateKnown = %d, %d; want Update's 0, 3", off, same)
	}
}
