-- Where each event came from: NULL for a delivery, 'reconciled' for an event
-- the reconciler found in the service's events list and no delivery brought.
-- NULL costs delivered rows nothing, and the insert of deliveries is unchanged.
ALTER TABLE payhook_inbox ADD COLUMN source TEXT;

-- The few reconciled events, newest first, for the dashboard's filter.
CREATE INDEX IF NOT EXISTS payhook_inbox_reconciled ON payhook_inbox (namespace, received_at) WHERE source IS NOT NULL;

-- One row per namespace that reconciles: up to when every event the service
-- created is known to be in the inbox (`reconciled_until`, the service's
-- `created`, Unix seconds), which process reconciles now (`owner`, until
-- `lease_until`, Unix ms), and how the last passes went.
CREATE TABLE IF NOT EXISTS payhook_inbox_reconciler (
    namespace TEXT NOT NULL PRIMARY KEY,
    reconciled_until BIGINT,
    owner TEXT,
    lease_until BIGINT,
    last_success_at BIGINT,
    last_failure_at BIGINT,
    last_error TEXT,
    failures BIGINT NOT NULL DEFAULT 0
);
