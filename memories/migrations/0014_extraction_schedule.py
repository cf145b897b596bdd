"""The sleep-time extraction schedule: every minute, threads idle past their due time
get an extraction run. Idempotent like 0003: an existing (perhaps retuned) schedule stays."""

from django.db import migrations

NAME = "extract_threads"
FUNC = "memories.formation.runs.extract_due_threads"


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
        ("memories", "0013_threads"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_schedule, delete_schedule)]
