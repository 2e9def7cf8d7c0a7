package lanes

import (
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/rs/zerolog"

	"github.com/lanefleet/lanefleet/chatcmd"
	"github.com/lanefleet/lanefleet/events"
	"github.com/lanefleet/lanefleet/kvstore"
	"github.com/lanefleet/lanefleet/lanes/internal/slots"
)

// Config configures a Worker.
type Config struct {
	ID          string // worker id in logs, leases and events; default random
	Concurrency int    // lanes owned (turns running) at once; default DefaultConcurrency
	MaxPayload  int    // inbound payload limit in bytes; default events.DefaultMaxPayload
	// MaxInflightBytes bounds the payload bytes of the messages that
	// brought the lanes running here (their triggers): a lane takes a slot
	// only when its payload fits, else it waits in line like a lane
	// finding every slot busy. A payload larger than the budget runs
	// alone. It is what lets Concurrency be large (each turn in flight
	// keeps a few copies of its payload) while a sender of large messages
	// cannot fill every slot with one. 0 = DefaultMaxInflightBytes;
	// negative: no budget.
	MaxInflightBytes int64
	// MaxAttempts is how many attempts at one message may fail (its
	// handler failed, or its worker died mid-turn) before it is
	// dead-lettered as poison; an attempt that ended for no fault of the
	// message (a transient store error, its live worker losing the lane)
	// does not count (see UncountedToken). Default 3.
	MaxAttempts   int
	ShutdownGrace time.Duration // how long a shutdown lets running turns finish; default 10s
	RetryDelay    time.Duration // first delay before retrying a failed turn; default 500ms
	SweepEvery    time.Duration // how often stranded lanes are looked for; default the dispatch AckWait, <0 disables
	// SessionTTL forgets sessions untouched that long (package
	// retention), checked by the sweep; 0 keeps them forever.
	SessionTTL time.Duration
	// RetentionRate is the most sessions the retention pass forgets a
	// second (retention.Policy.Rate; one worker of the fleet runs the
	// pass at a time); 0 = retention.DefaultRate.
	RetentionRate int
	// LaneTurnBudget is how many turns a lane runs before it yields its
	// slot to a lane that waits for one (fair scheduling; see the package
	// doc): 0 = DefaultLaneTurnBudget; negative turns fairness off (a lane
	// keeps its slot while it has messages, and a delivery that finds
	// every slot busy is handed back at once).
	LaneTurnBudget int
	// LaneTimeBudget, when positive, also yields the slot at the first
	// turn boundary after the lane has had it this long.
	LaneTimeBudget time.Duration
	// Linger is how long an owner keeps its lane after a turn that left it
	// empty, waiting for the session's next message: a client that
	// answers at once saves releasing and taking the lane again (two
	// lease writes and a read). The slot stays taken meanwhile, so no
	// owner lingers while its slot would go to a lane waiting for one
	// (a tenant under its share lingers while only tenants at or over
	// theirs wait). 0 = DefaultLinger,
	// negative = none.
	Linger time.Duration
	// SetupConcurrency bounds how many lanes set up a turn at once
	// (lease, reads, fence, start event; see setupGate), so a burst of
	// sessions is set up in arrival order rather than all finishing late
	// together. 0 = four per core; negative = no bound.
	SetupConcurrency int
	// CheckSettings, when set, vets the run settings of a settings
	// message before they are stored (the fleet refuses a model it would
	// not run): a refusal ends the message's run with an invalid_input
	// error saying why, and nothing is stored.
	CheckSettings func(*events.RunSettings) error
	// Paused, when set, says whether a session is paused (its budget is
	// reached): its lane's owner runs none of its messages, lets the lane
	// go and acks its trigger, the sweep leaves the lane alone, and Wake
	// takes it up again once Paused says no. nil = never paused.
	Paused func(key string) bool
	// PauseNotice, when set with Paused, is the text of the notice a
	// paused session's waiting messages get at once, each on its run (a
	// lifecycle events.PhasePaused event), so their senders know why
	// nothing runs; "" = none.
	PauseNotice func(key string) string
	// Tenant, when set, names a session's tenant on its runs' start
	// events, and divides the worker's slots among tenants when lanes
	// wait for one (TenantWeight); nil = none.
	Tenant func(key string) string
	// Lineage reports whether session child may deliver its completion
	// to session parent (a spawn message's Parent): the fleet's rule is
	// "the same tenant". Nil: no session adopts a parent, and none
	// delivers a completion.
	Lineage func(child, parent string) bool
	// SealKey is the fleet's seal key (kvstore.Lanes.SealKey): a child
	// adopts only a parent it sealed, a parent runs only completions it
	// sealed, and the completions the worker delivers carry its seal.
	// Nil: Run reads it from the lanes bucket before it takes messages.
	SealKey []byte
	// TenantWeight is a tenant's weight in the slots' division: while
	// lanes wait, a freed slot goes to the waiting tenant with the fewest
	// slots in use for its weight. nil (or below 1) = 1: equal shares.
	TenantWeight func(tenant string) int
	// ChatCommands makes the lane read a message whose text is a chat
	// command (package chatcmd) as that command: /stop is a stop
	// command, /queue, /model, /think, /verbose and /reasoning with an
	// argument are settings messages, and the others reach the handler as
	// Turn.Command, in lane order like any message. Off, such a text is a
	// prompt like any other.
	ChatCommands bool
	// CommandsOff, when set, turns ChatCommands off for one session: its
	// messages go to the handler as they are (a named agent whose
	// operator turned its commands off). nil = none.
	CommandsOff func(key string) bool
	// ChatDefaults are the worker's model and thinking level, named by
	// the replies of the settings commands for a session that sets none.
	ChatDefaults chatcmd.Defaults
	Logger       zerolog.Logger
	// Now reads the clock the lane's decisions use (when a turn ended, how
	// long a lane has had its slot or waited in line, a message's age,
	// the retention cutoff, event times); default time.Now. Timers and
	// deadlines of network calls use the wall clock.
	Now func() time.Time
	// Liveness, when set, keeps this worker's life in the liveness bucket
	// and has it take over at once the lanes of workers found dead
	// (liveness.go): a dead worker's sessions resume within about
	// LivenessEvery×1.5 of its death instead of AckWait. nil: a dead
	// worker's lanes wait for AckWait and its leases' lapse.
	Liveness *kvstore.Liveness
	// LivenessEvery is how often the worker beats, and how late a beat
	// may be (half of it more) before the others ask whether its
	// connection is gone; default kvstore.DefaultLivenessEvery.
	LivenessEvery time.Duration
	// Index, when set, hears of each session's activity and of its end:
	// the session index (package sessionindex) the listings page through.
	Index Index
	// setupKeep replaces gateKeep (tests).
	setupKeep time.Duration
	// deadRetry replaces deadRetryDelay (tests).
	deadRetry time.Duration
}

// Config defaults.
const (
	// DefaultConcurrency lets one worker keep a thousand model calls in
	// flight: a turn waiting on its model costs ~85 KB and 3 goroutines
	// (lanebench -scenario inflight), and DefaultMaxInflightBytes bounds
	// what large payloads can add.
	DefaultConcurrency = 1024
	// DefaultMaxInflightBytes: 1,024 turns of 64 KiB messages at once, or
	// 16 of the largest (4 MiB; ~23 MB of RSS each in flight).
	DefaultMaxInflightBytes = 64 << 20
	DefaultMaxAttempts      = 3
	DefaultShutdownGrace    = 10 * time.Second
	DefaultLinger           = 10 * time.Millisecond
)

func (c Config) withDefaults() Config {
	if c.ID == "" {
		c.ID = "w-" + randomHex(4)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	if c.LaneTurnBudget == 0 {
		c.LaneTurnBudget = DefaultLaneTurnBudget
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = events.DefaultMaxPayload
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.RetryDelay == 0 {
		c.RetryDelay = 500 * time.Millisecond
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.deadRetry == 0 {
		c.deadRetry = deadRetryDelay
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.LivenessEvery <= 0 {
		c.LivenessEvery = kvstore.DefaultLivenessEvery
	}
	return c
}

// chatCommands reports whether a session's messages are read as chat
// commands.
func (c *Config) chatCommands(key string) bool {
	return c.ChatCommands && (c.CommandsOff == nil || !c.CommandsOff(key))
}

// tenant is the session's tenant (Config.Tenant), "" without one.
func (c *Config) tenant(key string) string {
	if c.Tenant == nil {
		return ""
	}
	return c.Tenant(key)
}

// shares divide the slots among the sessions' tenants (Tenant,
// TenantWeight).
func (c Config) shares() slots.Shares {
	if c.Tenant == nil {
		return slots.Shares{}
	}
	return slots.Shares{Weight: c.TenantWeight, Tenant: func(token string) string {
		key, err := events.TokenKey(token)
		if err != nil {
			return ""
		}
		return c.Tenant(key)
	}}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
