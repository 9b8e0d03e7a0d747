from django.db import migrations

# The tsvector column kept in the row (STORAGE MAIN: compressed there if need be, moved out
# only when the row cannot hold it) rather than out of line in TOAST, where a 150-word
# page's ~1.8 kB tsvector went: every insert wrote it to the TOAST table and its index too,
# and ts_rank_cd fetched it from there for each of the RANKED matches it ranks (bench/search.py;
# bench/README.md, search.py). Rows already stored keep theirs until rewritten
# (`archiver reindex`).
FORWARD = "ALTER TABLE crawls_pagetext ALTER COLUMN search SET STORAGE MAIN"
BACKWARD = "ALTER TABLE crawls_pagetext ALTER COLUMN search SET STORAGE EXTENDED"


def run(sql):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)
    return apply


class Migration(migrations.Migration):

    dependencies = [
        ('crawls', '0024_qa_at_crawl'),
    ]

    operations = [
        migrations.RunPython(run(FORWARD), run(BACKWARD)),
    ]
