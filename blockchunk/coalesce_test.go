package blockchunk

import (
	"slices"
	"testing"
	"time"
)

func TestCoalescer(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1750000000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type op struct {
		add   string // block to Add ("" with tick/flush set means no Add)
		at    int    // ms after t0
		tick  bool
		flush bool
		want  []string
	}
	tests := []struct {
		name string
		cfg  CoalesceConfig
		ops  []op
	}{
		{
			// Small blocks merge with the joiner and wait for the idle time.
			name: "merge then idle flush",
			cfg:  CoalesceConfig{MinChars: 5, MaxChars: 100, Idle: time.Second, Joiner: "\n\n"},
			ops: []op{
				{add: "one", at: 0},
				{add: "two", at: 500},
				{tick: true, at: 1400},
				{tick: true, at: 1500, want: []string{"one\n\ntwo"}},
			},
		},
		{
			// Below MinChars an idle tick only re-arms the timer.
			name: "idle below minimum re-arms",
			cfg:  CoalesceConfig{MinChars: 50, MaxChars: 100, Idle: time.Second, Joiner: " "},
			ops: []op{
				{add: "hi", at: 0},
				{tick: true, at: 1000},
				{tick: true, at: 1999},
				{flush: true, at: 2000, want: []string{"hi"}},
			},
		},
		{
			// A block that would overflow MaxChars sends the buffer first
			// and starts a new one.
			name: "overflow sends the buffer first",
			cfg:  CoalesceConfig{MinChars: 1, MaxChars: 10, Idle: time.Second, Joiner: " "},
			ops: []op{
				{add: "aaaa", at: 0},
				{add: "bbbbbbb", at: 1, want: []string{"aaaa"}},
				{flush: true, at: 2, want: []string{"bbbbbbb"}},
			},
		},
		{
			// A block of at least MaxChars on its own passes straight through
			// after the buffer.
			name: "oversized block passes through",
			cfg:  CoalesceConfig{MinChars: 1, MaxChars: 5, Idle: time.Second, Joiner: " "},
			ops: []op{
				{add: "ab", at: 0},
				{add: "cdefghij", at: 1, want: []string{"ab", "cdefghij"}},
				{flush: true, at: 2},
			},
		},
		{
			// Reaching MaxChars exactly sends at once.
			name: "exactly max sends",
			cfg:  CoalesceConfig{MinChars: 1, MaxChars: 7, Joiner: " "},
			ops:  []op{{add: "abc", at: 0}, {add: "def", at: 1, want: []string{"abc def"}}},
		},
		{
			// Blank blocks are ignored.
			name: "blank ignored",
			cfg:  CoalesceConfig{MinChars: 1, MaxChars: 7, Joiner: " "},
			ops:  []op{{add: " \n", at: 0}, {flush: true, at: 1}},
		},
		{
			// Idle 0 never flushes on its own.
			name: "idle off",
			cfg:  CoalesceConfig{MinChars: 1, MaxChars: 100, Joiner: "\n"},
			ops:  []op{{add: "x", at: 0}, {tick: true, at: 99999}, {flush: true, at: 100000, want: []string{"x"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := NewCoalescer(tt.cfg)
			for i, o := range tt.ops {
				var got []string
				switch {
				case o.tick:
					got = c.Tick(ms(o.at))
				case o.flush:
					got = c.Flush()
				default:
					got = c.Add(o.add, ms(o.at))
				}
				if !slices.Equal(got, o.want) {
					t.Errorf("op %d: got %q, want %q", i, got, o.want)
				}
			}
		})
	}
}

func TestCoalesceConfigFor(t *testing.T) {
	t.Parallel()
	got := CoalesceConfigFor(Config{MinChars: 800, MaxChars: 1200, BreakPreference: BreakSentence}, 0)
	want := CoalesceConfig{MinChars: 800, MaxChars: 4000, Idle: time.Second, Joiner: " "}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := CoalesceConfigFor(Config{MinChars: 800}, 300); got.MinChars != 300 || got.Joiner != "\n\n" {
		t.Errorf("clamped: %+v", got)
	}
}
