"""Snapshots keep the crawler's load state; exit 9 has a label of its own (no_page); a
Snapshot's filename is the kept archive's name (docs/crawlers.md)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('crawls', '0009_list_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='snapshot',
            name='load_state',
            field=models.PositiveSmallIntegerField(blank=True, help_text="The crawler's loadState: below 2 the page did not load.", null=True),
        ),
        migrations.AlterField(
            model_name='process',
            name='exit_reason',
            field=models.CharField(blank=True, choices=[('', '-'), ('done', 'Done'), ('oom', 'Oom'), ('interrupted', 'Interrupted'), ('permanent', 'Permanent'), ('limit', 'Limit'), ('crash', 'Crash'), ('removed', 'Removed'), ('disk', 'Disk'), ('redis', 'Redis'), ('orphaned', 'Orphaned'), ('no_page', 'No Page')], default='', max_length=16),
        ),
        migrations.AlterField(
            model_name='snapshot',
            name='filename',
            field=models.CharField(blank=True, default='', help_text='The kept archive holding it (set once its WACZ is kept).', max_length=300),
        ),
    ]
