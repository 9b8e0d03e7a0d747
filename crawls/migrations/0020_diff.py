# Change alerts (issue 25): what a schedule watches, one ChangeCheck per watched crawl, crawl.changed once per crawl.

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('crawls', '0018_collections'),
    ]

    operations = [
        migrations.CreateModel(
            name='ChangeCheck',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('retry_at', models.DateTimeField(blank=True, help_text='Due when <= now; lease expiry while claimed; NULL once finished.', null=True)),
                ('lease_owner', models.CharField(blank=True, default='', help_text='Runner holding the lease.', max_length=64)),
                ('lease_token', models.BigIntegerField(default=0, help_text='Fencing token, bumped by every claim.')),
                ('status', models.CharField(choices=[('pending', 'Pending'), ('done', 'Done'), ('failed', 'Failed')], default='pending', max_length=16)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('changed', models.BooleanField(default=False)),
                ('counts', models.JSONField(blank=True, default=dict)),
                ('error', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'ordering': ['id'],
            },
        ),
        migrations.AddField(
            model_name='schedule',
            name='watch',
            field=models.JSONField(blank=True, help_text='What a change alert watches: null = no alerts, {"pages": true}, {"urls": [...]} or {"selector": "..."} (crawls/alerts.py).', null=True),
        ),
        migrations.AddField(
            model_name='schedule',
            name='watch_since',
            field=models.DateTimeField(blank=True, help_text='Crawls that end from then on are compared (not older ones).', null=True),
        ),
        migrations.AlterField(
            model_name='crawlevent',
            name='name',
            field=models.CharField(choices=[('crawl.queued', 'crawl.queued'), ('crawl.started', 'crawl.started'), ('crawl.paused', 'crawl.paused'), ('crawl.resumed', 'crawl.resumed'), ('crawl.completed', 'crawl.completed'), ('crawl.stopped', 'crawl.stopped'), ('crawl.failed', 'crawl.failed'), ('crawl.canceled', 'crawl.canceled'), ('crawl.quota_reached', 'crawl.quota_reached'), ('crawl.changed', 'crawl.changed')], max_length=40),
        ),
        migrations.AddConstraint(
            model_name='crawlevent',
            constraint=models.UniqueConstraint(condition=models.Q(('name__in', ('crawl.changed',))), fields=('crawl', 'name'), name='crawlevent_once_per_crawl'),
        ),
        migrations.AddField(
            model_name='changecheck',
            name='crawl',
            field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='change_check', to='crawls.crawl'),
        ),
        migrations.AddField(
            model_name='changecheck',
            name='previous',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='crawls.crawl'),
        ),
        migrations.AddIndex(
            model_name='changecheck',
            index=models.Index(condition=models.Q(('retry_at__isnull', False)), fields=['retry_at', 'created_at'], name='changecheck_due'),
        ),
    ]
