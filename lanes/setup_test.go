package lanes

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/internal/natstest"
	"github.com/lanefleet/lanefleet/kvstore"
)

// TestStreamLimits: every stream gets a byte limit; the inbound stream,
// once full, refuses a new message with "maximum bytes exceeded" and keeps
// every message it accepted; an existing stream without limits (made by
// an older worker) gets them, DiscardNew, without losing a message. At R1
// the streams the owners read serve Direct Get (their leader is their only
// copy; TestZombieEventsFencedOnReplicatedStream checks R3 keeps it off).
func TestStreamLimits(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, srv.URL))

	// An older fleet's inbound stream: no byte limit, DiscardOld.
	old, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: events.InboundStream,
		Subjects: []string{events.InboundPrefix + "*"}, Discard: jetstream.DiscardOld})
	if err != nil {
		t.Fatal(err)
	}
	publish := func(i int) error {
		m := nats.NewMsg(events.InboundPrefix + "full")
		m.Data = fmt.Appendf(nil, `{"text":"message %04d with some padding to fill the stream"}`, i)
		_, err := js.PublishMsg(t.Context(), m)
		return err
	}
	for i := range 10 {
		if err := publish(i); err != nil {
			t.Fatal(err)
		}
	}
	info, _ := old.Info(t.Context())
	limit := int64(info.State.Bytes) + 2048 // room for a few more only

	s, err := EnsureStreams(t.Context(), js, StreamConfig{InboundMaxBytes: limit, LaneMaxMsgs: -1, LaneMaxBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		st      jetstream.Stream
		max     int64
		discard jetstream.DiscardPolicy
		direct  bool
	}{
		{s.Inbound, limit, jetstream.DiscardNew, true},
		{s.Events, DefaultEventMaxBytes, jetstream.DiscardOld, true},
		{s.Dead, DefaultDeadMaxBytes, jetstream.DiscardNew, false},
	} {
		info, err := c.st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.MaxBytes != c.max || info.Config.Discard != c.discard || info.Config.AllowDirect != c.direct {
			t.Errorf("%s: max bytes %d discard %v direct %v, want %d %v %v", info.Config.Name, info.Config.MaxBytes, info.Config.Discard, info.Config.AllowDirect,
				c.max, c.discard, c.direct)
		}
	}

	accepted := 10
	var refusal error
	for i := 10; i < 1000 && refusal == nil; i++ {
		if refusal = publish(i); refusal == nil {
			accepted++
		}
	}
	var apiErr *jetstream.APIError
	if !errors.As(refusal, &apiErr) || apiErr.Description != "maximum bytes exceeded" {
		t.Fatalf("publish to a full inbound stream: %v, want maximum bytes exceeded", refusal)
	}
	info, err = s.Inbound.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(accepted) || info.State.FirstSeq != 1 {
		t.Fatalf("inbound holds %d messages from seq %d, want all %d accepted from 1", info.State.Msgs, info.State.FirstSeq, accepted)
	}
}

// TestStreamLimitsDefaultsAndNone: 0 is each limit's default, -1 none.
func TestStreamLimitsDefaultsAndNone(t *testing.T) {
	t.Parallel()
	c := StreamConfig{EventMaxBytes: -1}.withDefaults()
	if c.InboundMaxBytes != DefaultInboundMaxBytes || c.DeadMaxBytes != DefaultDeadMaxBytes || c.EventMaxBytes != -1 {
		t.Fatalf("limits = %d %d %d", c.InboundMaxBytes, c.EventMaxBytes, c.DeadMaxBytes)
	}
}

// TestLaneCap: a lane's cap is the smaller of its message limit and what
// its byte limit holds of the largest message (the payload limit plus
// header room), never below laneMinMsgs; -1 on both is none.
func TestLaneCap(t *testing.T) {
	t.Parallel()
	const msg = 4<<20 + HeaderRoom // the default largest message
	tests := []struct {
		name string
		cfg  StreamConfig
		want int64
	}{
		{"defaults: an eighth of 1 GiB in 4 MiB messages", StreamConfig{}, (DefaultInboundMaxBytes / 8) / msg},
		{"small payloads: the message limit", StreamConfig{MaxPayload: 16 << 10}, DefaultLaneMaxMsgs},
		{"bytes only", StreamConfig{LaneMaxMsgs: -1, LaneMaxBytes: 10 * msg}, 10},
		{"messages only", StreamConfig{LaneMaxMsgs: 7, LaneMaxBytes: -1}, 7},
		{"none", StreamConfig{LaneMaxMsgs: -1, LaneMaxBytes: -1}, -1},
		{"no inbound limit: no byte share", StreamConfig{InboundMaxBytes: -1}, DefaultLaneMaxMsgs},
		{"at least laneMinMsgs", StreamConfig{LaneMaxBytes: 1}, laneMinMsgs},
		{"a larger inbound limit", StreamConfig{InboundMaxBytes: 8 << 30}, (1 << 30) / msg},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.cfg.LaneCap(); got != tt.want {
				t.Fatalf("LaneCap() = %d, want %d", got, tt.want)
			}
		})
	}
	if err := (StreamConfig{InboundMaxBytes: 1 << 20, LaneMaxBytes: 2 << 20}).withDefaults().validate(); err == nil {
		t.Fatal("a lane byte limit over the inbound stream's was accepted")
	}
}

// TestFullLaneRefusesOnlyItsSender: a lane holding its cap refuses its
// sender's next message with "maximum messages per subject exceeded"; every
// other lane goes on accepting; the stream refuses a message over the
// payload limit plus header room.
func TestFullLaneRefusesOnlyItsSender(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, srv.URL))
	s, err := EnsureStreams(t.Context(), js, StreamConfig{LaneMaxMsgs: 5, MaxPayload: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if s.LaneCap() != 5 {
		t.Fatalf("lane cap %d, want 5", s.LaneCap())
	}
	publish := func(lane string, size int) error {
		m := nats.NewMsg(events.InboundPrefix + lane)
		m.Data = make([]byte, size)
		_, err := js.PublishMsg(t.Context(), m)
		return err
	}
	for range 5 {
		if err := publish("flood", 10); err != nil {
			t.Fatal(err)
		}
	}
	var apiErr *jetstream.APIError
	if err := publish("flood", 10); !errors.As(err, &apiErr) || apiErr.Description != "maximum messages per subject exceeded" {
		t.Fatalf("the full lane's sender: %v, want maximum messages per subject exceeded", err)
	}
	for range 5 {
		if err := publish("other", 10); err != nil {
			t.Fatalf("another lane refused: %v", err)
		}
	}
	if err := publish("big", 1024+HeaderRoom+1); !errors.As(err, &apiErr) || apiErr.Description != "message size exceeds maximum allowed" {
		t.Fatalf("a message over the payload limit: %v", err)
	}
}

// TestLaneCapNeverDeletes: an older fleet's inbound stream, without a
// per-lane cap, gets one, but never below what a lane holds (JetStream
// would delete that lane's oldest messages): the cap stays above the
// fullest lane until it has drained, then the sweep's TightenLaneCap
// lowers it to the configured one. No message is lost on the way.
func TestLaneCapNeverDeletes(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	js, _ := jetstream.New(natstest.Connect(t, srv.URL))
	old, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: events.InboundStream, Subjects: []string{events.InboundPrefix + ">"}})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for i := range 30 {
		ack, err := js.Publish(t.Context(), events.InboundPrefix+"backlog", fmt.Appendf(nil, "m%d", i))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ack.Sequence)
	}
	cfg := StreamConfig{LaneMaxMsgs: 8, LaneMaxBytes: -1}
	s, err := EnsureStreams(t.Context(), js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stored := func() uint64 {
		t.Helper()
		info, err := old.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	if n := stored(); n != 30 {
		t.Fatalf("%d messages left of 30: setting the cap deleted some", n)
	}
	if s.LaneCap() != 30+2 {
		t.Fatalf("lane cap %d, want 32 (the fullest lane and a margin)", s.LaneCap())
	}
	// Nothing to lower while the lane holds as much.
	if err := s.TightenLaneCap(t.Context(), js); err != nil || s.LaneCap() != 32 {
		t.Fatalf("tighten: %v, cap %d", err, s.LaneCap())
	}
	// The lane drains (its owners delete what they processed).
	for _, seq := range seqs[:26] {
		if err := s.Inbound.DeleteMsg(t.Context(), seq); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.TightenLaneCap(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	info, err := s.Inbound.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.LaneCap() != 8 || info.Config.MaxMsgsPerSubject != 8 || !info.Config.DiscardNewPerSubject || info.State.Msgs != 4 {
		t.Fatalf("after draining: cap %d, stream %d per subject (discard new %v), %d messages; want 8, 8, true, 4",
			s.LaneCap(), info.Config.MaxMsgsPerSubject, info.Config.DiscardNewPerSubject, info.State.Msgs)
	}
	// A worker starting now sets the configured cap at once.
	again, err := EnsureStreams(t.Context(), js, cfg)
	if err != nil || again.LaneCap() != 8 {
		t.Fatalf("ensure again: %v, cap %d", err, again.LaneCap())
	}
}

// TestLongDrainKeepsLaneRoom: an owner draining a lane that never empties
// deletes what it processed as it goes, so the messages its turns
// answered do not fill the lane's cap and refuse its sender. (The lane
// holds four waiting messages, the drain's trigger, and the one just
// answered until it is deleted.)
func TestLongDrainKeepsLaneRoom(t *testing.T) {
	t.Parallel()
	f := newFleetWith(t, StreamConfig{AckWait: 5 * time.Second, LaneMaxMsgs: 8, LaneMaxBytes: -1}, 5*time.Second)
	f.startWorker(t, &echoHandler{}, Config{})
	subj, _ := events.InboundSubject("busy")
	send := func(text string) (uint64, error) {
		data, ct, _ := events.EncodeInbound(&events.Inbound{Text: text}, false)
		m := nats.NewMsg(subj)
		m.Data = data
		m.Header.Set(events.HeaderContentType, ct)
		ack, err := f.js.PublishMsg(t.Context(), m)
		if err != nil {
			return 0, err
		}
		return ack.Sequence, nil
	}
	var waiting []uint64
	for i := range 4 {
		seq, err := send(fmt.Sprint("m", i))
		if err != nil {
			t.Fatal(err)
		}
		waiting = append(waiting, seq)
	}
	// Each answer brings the next message: the lane always has one waiting.
	for i := 4; i < 30; i++ {
		f.waitFinal(t, "busy", waiting[0])
		waiting = waiting[1:]
		seq, err := send(fmt.Sprint("m", i))
		if err != nil {
			t.Fatalf("message %d refused while %d wait: %v", i, len(waiting), err)
		}
		waiting = append(waiting, seq)
	}
	for _, seq := range waiting {
		f.waitFinal(t, "busy", seq)
	}
}

// TestRejoinOnAFullStore: a worker joining a fleet whose streams exist
// finds them even when the store has no room left for their byte limits
// again. JetStream checks a create's reservation before it finds the
// stream exists, so declaring them by create first refused the second
// worker of a fleet that had filled its store with buckets.
func TestRejoinOnAFullStore(t *testing.T) {
	t.Parallel()
	s, err := embedded.Start(embedded.Config{Name: "full", DataDir: t.TempDir(), MaxStore: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	js, _ := jetstream.New(natstest.Connect(t, s.ClientURL()))
	cfg := StreamConfig{InboundMaxBytes: 16 << 20, EventMaxBytes: 16 << 20, DeadMaxBytes: 8 << 20}
	if _, err := EnsureStreams(t.Context(), js, cfg); err != nil {
		t.Fatal(err)
	}
	steps := jetstream.StreamConfig{Name: kvstore.StepsStream, Subjects: []string{kvstore.StepsPrefix + ">"}, MaxBytes: 8 << 20}
	if _, err := kvstore.EnsureStream(t.Context(), js, steps); err != nil {
		t.Fatal(err)
	}
	// The rest of the store goes to a bucket: 16 MiB left, 48 MiB of
	// streams already reserved, none to reserve again.
	if _, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "filler", MaxBytes: 16 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureStreams(t.Context(), js, cfg); err != nil {
		t.Fatalf("a second worker's EnsureStreams on a full store: %v", err)
	}
	if _, err := kvstore.EnsureStream(t.Context(), js, steps); err != nil {
		t.Fatalf("a second worker's steps stream on a full store: %v", err)
	}
	if _, err := kvstore.EnsureStream(t.Context(), js, jetstream.StreamConfig{Name: "EXTRA", Subjects: []string{"extra.>"}, MaxBytes: 8 << 20}); err == nil {
		t.Fatal("a new stream past the store's room was made") // the store is full: the test above proves something
	}
}

// TestLoserOfACreateRaceFindsTheStream: when two workers declare a stream
// at once on a store with room for one, JetStream refuses the second
// create for storage, not for the name (so a worker that trusted the error
// stopped at start: TestScheduleAcrossWorkerFaults saw it); RacedCreate
// finds the winner's stream instead.
func TestLoserOfACreateRaceFindsTheStream(t *testing.T) {
	t.Parallel()
	s, err := embedded.Start(embedded.Config{Name: "premise", DataDir: t.TempDir(), MaxStore: 24 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	js, _ := jetstream.New(natstest.Connect(t, s.ClientURL()))
	sc := jetstream.StreamConfig{Name: "X", Subjects: []string{"x.>"}, MaxBytes: 16 << 20}
	if _, err := js.CreateStream(t.Context(), sc); err != nil {
		t.Fatal(err)
	}
	sc.Description = "another worker's"
	_, err = js.CreateStream(t.Context(), sc) // the loser's create
	if err == nil || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		t.Fatalf("the loser's create: %v, want a storage refusal", err)
	}
	if !kvstore.RacedCreate(err, func() error { _, err := js.Stream(t.Context(), "X"); return err }) {
		t.Fatal("RacedCreate did not find the stream that exists")
	}
	if kvstore.RacedCreate(err, func() error { _, err := js.Stream(t.Context(), "Y"); return err }) {
		t.Fatal("RacedCreate found a stream that does not exist")
	}
}

// TestEnsureStreamsTwiceSendsNoUpdate: a second worker ensuring the
// fleet's streams (every worker does at start) sends no stream update when
// they already have their configuration: an update rewrites a stream's
// store under the consumers other workers are making, which nats-server
// v2.15.2 races. A spy counts the $JS.API.STREAM.UPDATE requests up to a
// mark published after EnsureStreams on the same connection.
func TestEnsureStreamsTwiceSendsNoUpdate(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	first, _ := jetstream.New(natstest.Connect(t, srv.URL))
	if _, err := EnsureStreams(t.Context(), first, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	updatesBy := natstest.Spy(t, srv.URL, "$JS.API.STREAM.UPDATE.>")
	nc := natstest.Connect(t, srv.URL)
	js, _ := jetstream.New(nc)
	if _, err := EnsureStreams(t.Context(), js, StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	updates := updatesBy(nc)
	if len(updates) != 0 {
		t.Errorf("a second EnsureStreams sent updates %v, want none", updates)
	}
}
