"""Browser profiles: a tar.gz per org and name (crawls/profiles.py keeps the file)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('crawls', '0010_snapshot_load_state'),
    ]

    operations = [
        migrations.CreateModel(
            name='BrowserProfile',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=64)),
                ('sha256', models.CharField(max_length=64)),
                ('size_bytes', models.PositiveBigIntegerField()),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('org', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='browser_profiles', to='crawls.org')),
            ],
            options={
                'ordering': ['org', 'name'],
                'constraints': [models.UniqueConstraint(fields=('org', 'name'), name='browser_profile_name_per_org')],
            },
        ),
    ]
