package budgetstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/lanefleet/lanefleet/governance"
)

// The audit stream: every operator change of a budget, oldest dropped past
// AuditMaxBytes.
const (
	AuditStream   = "AGENT_AUDIT"
	AuditSubject  = "agent.audit.budget"
	AuditMaxBytes = 64 << 20
	// maxWho bounds who an audit record names.
	maxWho = 256
)

// AuditRecord is one change of a budget: who made it, when, and the
// budget before and after.
type AuditRecord struct {
	At    time.Time        `json:"at"`
	Who   string           `json:"who"`
	Op    string           `json:"op"` // set, reset, remove, or quota
	Scope governance.Scope `json:"scope"`
	Old   governance.State `json:"old"`
	New   governance.State `json:"new"`
	// OldQuota and NewQuota are a quota change's (Op quota).
	OldQuota *governance.Quota `json:"oldQuota,omitempty"`
	NewQuota *governance.Quota `json:"newQuota,omitempty"`
}

// Audit stores rec in the audit stream, creating the stream when it is
// missing. It returns the stream's error, wrapped.
func (b *Bucket) Audit(ctx context.Context, rec AuditRecord) error {
	if len(rec.Who) > maxWho {
		rec.Who = rec.Who[:maxWho]
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("budgetstore: audit: %w", err)
	}
	_, err = b.js.Publish(ctx, AuditSubject, data)
	if errors.Is(err, jetstream.ErrNoStreamResponse) {
		_, cerr := b.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: AuditStream, Subjects: []string{"agent.audit.>"},
			Description: "Lanefleet audit: operators' changes of budgets", Storage: jetstream.FileStorage,
			Replicas: b.cfg.Replicas, MaxBytes: AuditMaxBytes, Discard: jetstream.DiscardOld})
		if cerr != nil {
			return fmt.Errorf("budgetstore: audit: create stream %s: %w", AuditStream, cerr)
		}
		_, err = b.js.Publish(ctx, AuditSubject, data)
	}
	if err != nil {
		return fmt.Errorf("budgetstore: audit: %w", err)
	}
	return nil
}
