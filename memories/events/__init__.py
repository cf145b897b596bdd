"""The change feed. Import the module you need; this package re-exports nothing.

- `record`: writing events in the transaction of the change (Python for the services, SQL for
  the jobs' one-statement batches), and erasing a purged memory's content from its events.
- `feed`: giving committed events their positions (the sequencer), an agent's page of the feed
  (`GET /api/v1/events`), an event as JSON, and retention.
"""
