-- Duplicate deliveries whose content differs from the stored event (the same
-- id, another type or data): one row per event, the first body is what the
-- inbox keeps and hands out, this records that a later copy said something
-- else — how many, when, and the last such body. Rare, so it is a table of
-- its own rather than a column every event row carries; rows whose event is
-- gone are removed by the workers' upkeep.
CREATE TABLE IF NOT EXISTS payhook_inbox_differing (
    namespace TEXT NOT NULL,
    event_id TEXT NOT NULL,
    first_at BIGINT NOT NULL,
    last_at BIGINT NOT NULL,
    copies BIGINT NOT NULL,
    last_body TEXT NOT NULL,
    PRIMARY KEY (namespace, event_id)
);
