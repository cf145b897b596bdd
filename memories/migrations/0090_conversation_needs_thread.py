"""A conversation memory needs its thread, now held by the database too (the writes have always
refused one without: `inputs.memory_fields_check`). Every write path stores `thread_id` as NULL
or a non-blank string, and no lifecycle step clears it, so no existing row breaks the rule."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0016_slugs_and_categories_matched_whole"),
        ("memories", "0089_event_scope"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="memory",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("category", "conversation"), _negated=True),
                    models.Q(
                        ("thread_id__isnull", False),
                        models.Q(("thread_id", ""), _negated=True),
                    ),
                    _connector="OR",
                ),
                name="memory_conversation_thread",
            ),
        ),
    ]
