"""The django-q2 schedules of the background jobs; `catch_up=False` lives in Q_CLUSTER.

Idempotent: a schedule that already exists (perhaps retuned by an operator) is left as it is.
"""

from django.db import migrations

# name -> (schedule_type, minutes): prune often (expired memories are invisible at once anyway,
# pruning only tidies), retention daily, re-embedding hourly (a no-op when nothing is stale).
SCHEDULES = {
    "prune_memories": ("I", 10),
    "purge_retention": ("D", None),
    "reembed": ("H", None),
}


def create_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for name, (schedule_type, minutes) in SCHEDULES.items():
        Schedule.objects.get_or_create(
            name=name,
            defaults={
                "func": "memories.tasks.run_job",
                "args": repr(name),
                "schedule_type": schedule_type,
                "minutes": minutes,
                "repeats": -1,
            },
        )


def delete_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.filter(name__in=SCHEDULES, func="memories.tasks.run_job").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0002_memory_models"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_schedules, delete_schedules)]
