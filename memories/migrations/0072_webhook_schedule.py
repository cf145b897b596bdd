"""The webhook dispatcher's schedule: every minute, besides the nudges that follow
each commit with events (memories/webhooks/delivery.py). Idempotent like 0014."""

from django.db import migrations

NAME = "dispatch_webhooks"
FUNC = "memories.webhooks.delivery.dispatch_webhooks"


def create_schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.get_or_create(
        name=NAME,
        defaults={"func": FUNC, "schedule_type": "I", "minutes": 1, "repeats": -1},
    )


def delete_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME, func=FUNC).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0071_event_position_sequence"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_schedule, delete_schedule)]
