package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/lanefleet/lanefleet/permission"
)

// permissions runs `worker permissions`: it prints the nats-server
// configuration of one user of a role, to paste into the server's file.
func permissions(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker permissions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		u                      permission.User
		sessions, tools, hooks stringList
	)
	role := fs.String("role", "", "the user's role: worker, sender, viewer, tool-server, hook-server or admin")
	format := fs.String("format", "authorization", "what to print: authorization (a whole authorization block), users (the user entry, for an existing users list or an account) or permissions (the permissions map alone)")
	fs.StringVar(&u.User, "user", "", "the NATS user name (letters, digits, '_', '-'); its inbox prefix is _INBOX_<user>")
	fs.Var(&sessions, "session", "a session key the sender or viewer may use (repeat for more)")
	fs.BoolVar(&u.AllSessions, "all-sessions", false, "the sender or viewer may use every session (a trusted front end or a dashboard)")
	fs.Var(&tools, "tool", "a tool the tool server serves (repeat for more)")
	fs.Var(&hooks, "hook", "a hook the hook server serves (repeat for more)")
	fs.StringVar(&u.NKey, "nkey", "", "authenticate the user with this public nkey (U...) instead of a password")
	fs.StringVar(&u.PasswordVar, "password-var", "", "configuration or environment variable holding the password or its bcrypt hash (default LANEFLEET_PASSWORD_<USER>)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: worker permissions --role worker|sender|viewer|tool-server|hook-server|admin --user NAME [--session KEY ...] [--all-sessions] [--tool NAME ...] [--hook NAME ...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("permissions: unexpected argument %q", fs.Arg(0))
	}
	r, err := permission.ParseRole(*role)
	if err != nil {
		return err
	}
	f, err := permission.ParseFormat(*format)
	if err != nil {
		return err
	}
	u.Role, u.Sessions, u.Tools, u.Hooks = r, sessions, tools, hooks
	return permission.Render(stdout, f, u)
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }
