package agentstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/agents"
)

// Files is the workspaces' object store: one object per file, named
// "<workspace>/<path>". Every put is a new version of the object (the
// store keeps the latest; its digest says which version a worker has).
type Files struct {
	obs jetstream.ObjectStore
	cfg BucketConfig
}

// FileInfo is one stored file.
type FileInfo struct {
	Path   string `json:"path"`
	Size   uint64 `json:"size"`
	Digest string `json:"digest"` // "SHA-256=<base64url>", as the object store writes it
}

// OpenFiles creates the object store when it is missing, or binds to it.
func OpenFiles(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (*Files, error) {
	cfg = cfg.withDefaults()
	obs, err := js.ObjectStore(ctx, cfg.FilesBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      cfg.FilesBucket,
			Description: "Lanefleet agent workspaces: identity, instruction, memory and skill files",
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
			MaxBytes:    cfg.FilesMaxBytes,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			obs, err = js.ObjectStore(ctx, cfg.FilesBucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("agentstore: open object store %s: %w", cfg.FilesBucket, err)
	}
	return &Files{obs: obs, cfg: cfg}, nil
}

// ErrFull is wrapped by the error of a Put the object store refused for
// its byte limit (the worker's --max-agent-files-bytes): files must be
// removed before more are stored.
var ErrFull = errors.New("agentstore: the workspace files are at the object store's byte limit")

// full reports whether err is the server refusing a put for the stream's
// byte limit (a stream that discards new messages).
func full(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && strings.Contains(apiErr.Description, "maximum bytes exceeded")
}

// objectName is a workspace file's object, after checking both names.
func objectName(ws, path string) (string, error) {
	if err := agents.ValidID(ws); err != nil {
		return "", fmt.Errorf("workspace: %w", err)
	}
	if err := agents.ValidFilePath(path); err != nil {
		return "", err
	}
	return ws + "/" + path, nil
}

// Put stores a file of a workspace (at most agents.MaxFileBytes).
func (f *Files) Put(ctx context.Context, ws, path string, data []byte) (FileInfo, error) {
	name, err := objectName(ws, path)
	if err != nil {
		return FileInfo{}, err
	}
	if len(data) > agents.MaxFileBytes {
		return FileInfo{}, fmt.Errorf("%w: file %s is %d bytes, the limit is %d", agents.ErrInvalid, path, len(data), agents.MaxFileBytes)
	}
	info, err := f.obs.PutBytes(ctx, name, data)
	if err != nil {
		if full(err) {
			err = fmt.Errorf("%w: %w", ErrFull, err)
		}
		return FileInfo{}, fmt.Errorf("agentstore: put %s: %w", name, err)
	}
	return FileInfo{Path: path, Size: info.Size, Digest: info.Digest}, nil
}

// Get reads a file of a workspace; ErrNotFound when there is none.
func (f *Files) Get(ctx context.Context, ws, path string) ([]byte, error) {
	name, err := objectName(ws, path)
	if err != nil {
		return nil, err
	}
	info, err := f.obs.GetInfo(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: file %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("agentstore: get %s: %w", name, err)
	}
	if info.Opts != nil && info.Opts.Link != nil {
		// agentstore never writes links; one would read another object
		// (or bucket) past the size check.
		return nil, fmt.Errorf("%w: file %s is an object store link", agents.ErrInvalid, name)
	}
	if info.Size > agents.MaxFileBytes {
		return nil, fmt.Errorf("%w: file %s is %d bytes, the limit is %d", agents.ErrInvalid, name, info.Size, agents.MaxFileBytes)
	}
	res, err := f.obs.Get(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("%w: file %s", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("agentstore: get %s: %w", name, err)
	}
	defer res.Close()
	// Bounded: the object may have been replaced by a larger one since
	// its info was read.
	b, err := io.ReadAll(io.LimitReader(res, agents.MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("agentstore: get %s: %w", name, err)
	}
	if len(b) > agents.MaxFileBytes {
		return nil, fmt.Errorf("%w: file %s is over the limit of %d bytes", agents.ErrInvalid, name, agents.MaxFileBytes)
	}
	return b, nil
}

// List lists a workspace's files, sorted by path.
func (f *Files) List(ctx context.Context, ws string) ([]FileInfo, error) {
	if err := agents.ValidID(ws); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	infos, err := f.obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("agentstore: list %s: %w", ws, err)
	}
	var out []FileInfo
	for _, in := range infos {
		if p, ok := strings.CutPrefix(in.Name, ws+"/"); ok && !in.Deleted && agents.ValidFilePath(p) == nil {
			out = append(out, FileInfo{Path: p, Size: in.Size, Digest: in.Digest})
		}
	}
	slices.SortFunc(out, func(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// Delete removes a file of a workspace; ErrNotFound when there is none.
func (f *Files) Delete(ctx context.Context, ws, path string) error {
	name, err := objectName(ws, path)
	if err != nil {
		return err
	}
	// The object store deletes a deleted object again without a word:
	// ask first, so a second removal says there was nothing to remove.
	if _, err := f.obs.GetInfo(ctx, name); errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("%w: file %s", ErrNotFound, name)
	}
	err = f.obs.Delete(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("%w: file %s", ErrNotFound, name)
	}
	if err != nil {
		return fmt.Errorf("agentstore: delete %s: %w", name, err)
	}
	return nil
}
