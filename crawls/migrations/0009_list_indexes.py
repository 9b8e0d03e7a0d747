"""The API's list indexes, known to Django's model state from now on.

0007 created them with plain SQL, outside the model state, so a later migration that
rebuilds the crawls table on SQLite (0008) dropped them: lists of 100k crawls then took
250 ms. IF NOT EXISTS: on PostgreSQL they survived and are kept as they are.
"""

from django.db import migrations, models

INDEXES = {
    "crawl_created_id": "(created_at, id)",
    "crawl_status_created_id": "(status, created_at, id)",
}


class Migration(migrations.Migration):

    dependencies = [
        ('crawls', '0008_admin'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(f"CREATE INDEX IF NOT EXISTS {name} ON crawls_crawl {columns}",
                                  reverse_sql=f"DROP INDEX IF EXISTS {name}")
                for name, columns in INDEXES.items()
            ],
            state_operations=[
                migrations.AddIndex(model_name='crawl', index=models.Index(
                    fields=['created_at', 'id'], name='crawl_created_id')),
                migrations.AddIndex(model_name='crawl', index=models.Index(
                    fields=['status', 'created_at', 'id'], name='crawl_status_created_id')),
            ],
        ),
    ]
