package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/lanefleet/lanefleet/permission"
)

// permissionsCommand is `worker permissions`: it prints the nats-server
// configuration of one user of a role, to paste into the server's file.
func permissionsCommand(stdout io.Writer) *cobra.Command {
	var (
		u                      permission.User
		sessions, tools, hooks []string
		role, format           string
	)
	c := &cobra.Command{
		Use:   "permissions --role worker|sender|viewer|tool-server|hook-server|admin --user NAME [--session KEY ...] [--all-sessions] [--tool NAME ...] [--hook NAME ...]",
		Short: "Print the nats-server permissions of one user of a role",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			r, err := permission.ParseRole(role)
			if err != nil {
				return usageError{err}
			}
			f, err := permission.ParseFormat(format)
			if err != nil {
				return usageError{err}
			}
			u.Role, u.Sessions, u.Tools, u.Hooks = r, sessions, tools, hooks
			if err := permission.Render(stdout, f, u); err != nil {
				return usageError{err}
			}
			return nil
		},
	}
	fs := c.Flags()
	fs.SortFlags = false
	fs.StringVar(&role, "role", "", "the user's role: worker, sender, viewer, tool-server, hook-server or admin")
	fs.StringVar(&format, "format", "authorization", "what to print: authorization (a whole authorization block), users (the user entry, for an existing users list or an account) or permissions (the permissions map alone)")
	fs.StringVar(&u.User, "user", "", "the NATS user name (letters, digits, '_', '-'); its inbox prefix is _INBOX_<user>")
	fs.StringArrayVar(&sessions, "session", nil, "a session key the sender or viewer may use (repeat for more)")
	fs.BoolVar(&u.AllSessions, "all-sessions", false, "the sender or viewer may use every session (a trusted front end or a dashboard)")
	fs.StringArrayVar(&tools, "tool", nil, "a tool the tool server serves (repeat for more)")
	fs.StringArrayVar(&hooks, "hook", nil, "a hook the hook server serves (repeat for more)")
	fs.StringVar(&u.NKey, "nkey", "", "authenticate the user with this public nkey (U...) instead of a password")
	fs.StringVar(&u.PasswordVar, "password-var", "", "configuration or environment variable holding the password or its bcrypt hash (default LANEFLEET_PASSWORD_<USER>)")
	return c
}
