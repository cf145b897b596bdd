from django.contrib.postgres.operations import BtreeGinExtension, TrigramExtension
from django.db import migrations
from pgvector.django import VectorExtension


class Migration(migrations.Migration):
    """pgvector for embeddings, pg_trgm for fuzzy text, btree_gin so the FTS index leads with tenant."""

    initial = True
    dependencies = []
    operations = [VectorExtension(), TrigramExtension(), BtreeGinExtension()]
