package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// LockFileName is the file that locks a JetStream store against a second
// server. It sits in the directory holding the store's "jetstream"
// directory (the worker's --data-dir), never inside it: JetStream reads
// every name there as an account.
const LockFileName = "lanefleet.lock"

// maxHolderBytes bounds what is read of a lock file another process wrote.
const maxHolderBytes = 4 << 10

// Holder says who holds a store lock. It is written into the lock file so
// that the next process to try can name it.
type Holder struct {
	PID    int       `json:"pid"`
	Host   string    `json:"host,omitempty"`   // machine name
	Worker string    `json:"worker,omitempty"` // worker id
	Listen string    `json:"listen,omitempty"` // the server's client address
	Since  time.Time `json:"since"`
}

// String describes the holder for an error message.
func (h Holder) String() string {
	if h.PID == 0 {
		return "another process (it has not written its name yet)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "pid %d", h.PID)
	if h.Host != "" {
		fmt.Fprintf(&b, " on %s", h.Host)
	}
	var more []string
	if h.Worker != "" {
		more = append(more, "worker "+h.Worker)
	}
	if h.Listen != "" {
		more = append(more, "listening on "+h.Listen)
	}
	if !h.Since.IsZero() {
		more = append(more, "since "+h.Since.Format(time.RFC3339))
	}
	if len(more) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(more, ", "))
	}
	return b.String()
}

// LockedError is returned by LockStore for a store another server holds.
type LockedError struct {
	Path   string // the lock file
	Holder Holder // zero when the file does not say
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("embedded: the data directory %s is in use by %s (lock file %s)", filepath.Dir(e.Path), e.Holder, e.Path)
}

// ErrStoreDir means the store's directory cannot be created or written.
var ErrStoreDir = errors.New("embedded: the data directory is not writable")

// LockPath returns the lock file of a JetStream store directory: beside
// the "jetstream" directory the server stores into (storeDir itself when
// it is named jetstream, else storeDir/jetstream, as nats-server does).
func LockPath(storeDir string) string {
	dir := filepath.Clean(storeDir)
	if filepath.Base(dir) == "jetstream" {
		dir = filepath.Dir(dir)
	}
	return filepath.Join(dir, LockFileName)
}

// StoreLock is an exclusive lock on a JetStream store, held from LockStore
// until Close. The kernel drops it with the process, so a killed worker
// leaves no stale lock behind (the file stays; it is not the lock).
type StoreLock struct {
	f *os.File
}

// LockStore creates storeDir's lock directory if needed and locks it for
// h. It returns a *LockedError when another process (or another server of
// this one) holds the store, and an error wrapping ErrStoreDir and the
// cause when the directory cannot be created or written.
func LockStore(storeDir string, h Holder) (*StoreLock, error) {
	path := LockPath(storeDir)
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStoreDir, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStoreDir, err)
	}
	held, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("embedded: lock %s: %w", path, err)
	}
	if !held {
		defer f.Close()
		return nil, &LockedError{Path: path, Holder: readHolder(f)}
	}
	l := &StoreLock{f: f}
	if err := l.SetHolder(h); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// readHolder reads what the holder wrote; a file it has not written yet
// (or that is not ours) gives the zero Holder.
func readHolder(f *os.File) Holder {
	b, _ := io.ReadAll(io.LimitReader(f, maxHolderBytes))
	var h Holder
	if json.Unmarshal(b, &h) != nil || h.PID < 0 {
		return Holder{}
	}
	return h
}

// SetHolder rewrites the lock file's description of its holder (a worker
// learns its id after the server is up).
func (l *StoreLock) SetHolder(h Holder) error {
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if err := l.f.Truncate(0); err != nil {
		return fmt.Errorf("%w: %w", ErrStoreDir, err)
	}
	if _, err := l.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("%w: %w", ErrStoreDir, err)
	}
	return nil
}

// Path returns the lock file.
func (l *StoreLock) Path() string { return l.f.Name() }

// Close releases the lock. Call it after the server has shut down.
func (l *StoreLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the descriptor releases the lock
	if errors.Is(err, fs.ErrClosed) {
		return nil
	}
	return err
}
