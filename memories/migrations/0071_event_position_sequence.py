from django.db import migrations

# Event positions (the feed's public ids, memories.events.feed.sequence) come from a sequence
# of their own: never reused, even after retention has deleted every event.
CREATE = "CREATE SEQUENCE IF NOT EXISTS memories_event_position_seq AS bigint START 1"
DROP = "DROP SEQUENCE IF EXISTS memories_event_position_seq"


class Migration(migrations.Migration):
    dependencies = [("memories", "0070_events")]

    operations = [migrations.RunSQL(CREATE, DROP)]
