package fleet

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/lanefleet/lanefleet/internal/embedded"
	"github.com/lanefleet/lanefleet/permission"
)

// redactURL drops the credentials of a comma-separated NATS URL list for
// messages and logs.
func redactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		if pu, err := neturl.Parse(strings.TrimSpace(u)); err == nil && pu.User != nil {
			pu.User = neturl.User("[redacted]")
			parts[i] = pu.String()
		}
	}
	return strings.Join(parts, ",")
}

func startEmbedded(cfg Config) (*server.Server, *server.Options, *embedded.StoreLock, error) {
	if cfg.DataDir == "" && cfg.ServerConfig == "" {
		return nil, nil, nil, errors.New("fleet: the embedded server needs a data directory (--data-dir)")
	}
	ec := embedded.Config{Name: "lanefleet", ConfigFile: cfg.ServerConfig, SyncAlways: &cfg.SyncAlways, InsecureListen: cfg.InsecureListen}
	if cfg.DataDir != "" {
		ec.DataDir = filepath.Join(cfg.DataDir, "jetstream")
	}
	switch {
	case cfg.Listen != "":
		h, p, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("fleet: --listen %q: %w", cfg.Listen, err)
		}
		port, err := strconv.Atoi(p)
		if err != nil || port < 0 || port > 65535 {
			return nil, nil, nil, fmt.Errorf("fleet: --listen %q: bad port", cfg.Listen)
		}
		if port == 0 {
			port = server.RANDOM_PORT
		}
		ec.Host, ec.Port = h, port
	case cfg.ServerConfig == "":
		ec.Host, ec.Port = "127.0.0.1", 4222
	}
	opts, err := embedded.Options(ec)
	switch {
	case errors.Is(err, embedded.ErrInsecureListen):
		return nil, nil, nil, fmt.Errorf("fleet: %w. Give the server users (--server-config nats.conf; `worker permissions` prints their permissions), listen on 127.0.0.1, or accept an open server with --insecure-listen", err)
	case errors.Is(err, embedded.ErrNoStoreDir):
		return nil, nil, nil, fmt.Errorf("fleet: the embedded server needs a data directory: --data-dir, or jetstream { store_dir } in %s", cfg.ServerConfig)
	case errors.Is(err, embedded.ErrConflict):
		return nil, nil, nil, fmt.Errorf("fleet: --server-config %s and --listen/--data-dir disagree: %w", cfg.ServerConfig, err)
	case err != nil:
		return nil, nil, nil, fmt.Errorf("fleet: %w", err)
	}
	if err := monitorOn(opts, cfg); err != nil {
		return nil, nil, nil, err
	}
	listen := ""
	if opts.Port > 0 {
		listen = "nats://" + net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port))
	}
	lock, err := embedded.LockStore(opts.StoreDir, holder(cfg.WorkerID, listen))
	var locked *embedded.LockedError
	switch {
	case errors.As(err, &locked):
		join := "--nats-url nats://<its address>"
		if strings.HasPrefix(locked.Holder.Listen, "nats://") {
			join = "--nats-url " + locked.Holder.Listen
		}
		return nil, nil, nil, fmt.Errorf("fleet: %w: two servers must never share a store. Stop that worker first, give this one its own --data-dir, or add it to that one's fleet with %s", err, join)
	case errors.Is(err, embedded.ErrStoreDir):
		return nil, nil, nil, fmt.Errorf("fleet: --data-dir: %w", err)
	case err != nil:
		return nil, nil, nil, fmt.Errorf("fleet: %w", err)
	}
	srv, err := embedded.StartOptions(opts)
	if err != nil {
		_ = lock.Close()
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, nil, nil, fmt.Errorf("fleet: %w: another worker or NATS server listens there. Give this worker another --listen, or join that server with --nats-url", err)
		}
		return nil, nil, nil, fmt.Errorf("fleet: %w", err)
	}
	return srv, opts, lock, nil
}

// monitorOn sets the embedded server's monitoring listener (/varz, /jsz,
// /healthz, ...) to cfg.NATSMonitor. It has no authentication, so a
// non-loopback address needs InsecureListen, as the client port does.
func monitorOn(opts *server.Options, cfg Config) error {
	if cfg.NATSMonitor == "" {
		return nil
	}
	if opts.HTTPPort != 0 {
		return fmt.Errorf("fleet: --nats-monitor and the monitoring port of --server-config %s: configure it in one place", cfg.ServerConfig)
	}
	h, p, err := net.SplitHostPort(cfg.NATSMonitor)
	if err != nil {
		return fmt.Errorf("fleet: --nats-monitor %q: %w", cfg.NATSMonitor, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return fmt.Errorf("fleet: --nats-monitor %q: bad port", cfg.NATSMonitor)
	}
	if !embedded.IsLoopback(h) && !cfg.InsecureListen {
		return fmt.Errorf("fleet: --nats-monitor %s: the monitoring endpoints have no authentication and show every connection and stream; listen on 127.0.0.1 or accept that with --insecure-listen", cfg.NATSMonitor)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts.HTTPHost, opts.HTTPPort = h, port
	return nil
}

// NATSMonitorAddr returns the embedded server's monitoring address, or ""
// when it serves none.
func (m *Member) NATSMonitorAddr() string {
	if m.Server == nil {
		return ""
	}
	if a := m.Server.MonitorAddr(); a != nil {
		return a.String()
	}
	return ""
}

// pinServerCert makes the connection to the embedded server trust exactly
// the certificate that server presents: the member runs it, so no CA is
// needed to know it is talking to itself.
func pinServerCert(opts *server.Options) (nats.Option, error) {
	if len(opts.TLSConfig.Certificates) == 0 || len(opts.TLSConfig.Certificates[0].Certificate) == 0 {
		return nil, errors.New("fleet: the embedded server's TLS certificate is not a file: give its CA with --tls-ca")
	}
	want := opts.TLSConfig.Certificates[0].Certificate[0]
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is the pin below, not a CA and a host name.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, want) {
				return errors.New("fleet: the server is not the embedded server (certificate differs)")
			}
			return nil
		},
	}
	return nats.Secure(tc), nil // a client certificate (ClientCert) still applies
}

func connectOptions(cfg Config) ([]nats.Option, error) {
	name := "lanefleet-worker"
	if cfg.WorkerID != "" {
		name += "-" + cfg.WorkerID
	}
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				cfg.Logger.Warn().Err(err).Msg("disconnected from NATS")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			cfg.Logger.Info().Str("url", redactURL(nc.ConnectedUrl())).Msg("reconnected to NATS")
		}),
		// Permission violations and slow consumers arrive asynchronously:
		// without this they would be silent.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			ev := cfg.Logger.Error().Err(err)
			if sub != nil {
				ev = ev.Str("subject", sub.Subject)
			}
			ev.Msg("NATS error")
		}),
	}
	if cfg.User != "" || cfg.Password != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	inbox := cfg.InboxPrefix
	if inbox == "" && cfg.User != "" {
		inbox = permission.InboxPrefix(cfg.User)
	}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	if cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("fleet: nkey: %w", err)
		}
		opts = append(opts, o)
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		opts = append(opts, nats.ClientCert(cfg.TLSCert, cfg.TLSKey))
	}
	if cfg.TLSCA != "" {
		opts = append(opts, nats.RootCAs(cfg.TLSCA))
	}
	return opts, nil
}
