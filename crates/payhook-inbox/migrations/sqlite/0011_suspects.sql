-- Whether a held event's attempt is counted before its handler runs. A
-- claim writes nothing more before the handler: the attempt is counted with
-- its end (the done mark or the failure). When a process dies, the events it
-- held come back when their lease runs out, uncounted — each may only have
-- waited in its queue — and marked suspect (1); a suspect's next attempt is
-- counted by a start mark committed before its handler runs, so an event
-- that crashes the process every time still ends dead. The migration marks
-- the events held right now suspect (see dialect/migrations.rs).
ALTER TABLE payhook_inbox ADD COLUMN suspect BIGINT NOT NULL DEFAULT 0;
