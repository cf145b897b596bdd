-- Event positions (the feed's public ids: memories.events.feed.sequence) come from a sequence
-- of their own: never reused, even after retention has deleted every event.
CREATE SEQUENCE IF NOT EXISTS memories_event_position_seq AS bigint START 1;
