"""Slugs and categories are matched whole: the validators' patterns end in `\\Z`, as `$` also
matched before a final newline (validators only: no SQL)."""

import django.contrib.postgres.fields
import django.core.validators
from django.db import migrations, models

import accounts.models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0015_tenant_kinds_version"),
    ]

    operations = [
        migrations.AlterField(
            model_name="agent",
            name="default_category",
            field=models.CharField(
                default="core",
                max_length=40,
                validators=[django.core.validators.RegexValidator("^[a-z0-9_-]{1,40}\\Z")],
            ),
        ),
        migrations.AlterField(
            model_name="agent",
            name="extraction_categories",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(
                    max_length=40,
                    validators=[django.core.validators.RegexValidator("^[a-z0-9_-]{1,40}\\Z")],
                ),
                blank=True,
                default=accounts.models.default_extraction_categories,
                size=None,
            ),
        ),
        migrations.AlterField(
            model_name="agent",
            name="slug",
            field=models.CharField(
                max_length=63,
                validators=[
                    django.core.validators.RegexValidator(
                        "^[a-z0-9][a-z0-9_-]{0,62}\\Z", "Use a-z, 0-9, _ and -."
                    )
                ],
            ),
        ),
        migrations.AlterField(
            model_name="tenant",
            name="slug",
            field=models.CharField(
                max_length=63,
                unique=True,
                validators=[
                    django.core.validators.RegexValidator(
                        "^[a-z0-9][a-z0-9_-]{0,62}\\Z", "Use a-z, 0-9, _ and -."
                    )
                ],
            ),
        ),
    ]
