from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('crawls', '0027_dedup_retry'),
    ]

    operations = [
        migrations.AddField(
            model_name='crawl',
            name='error_detail',
            field=models.TextField(blank=True, default='', help_text="Where its error came from (the instance, its exit code, the crawler's whole words)."),
        ),
        migrations.AlterField(
            model_name='crawl',
            name='error',
            field=models.TextField(blank=True, default='', help_text='Why it failed, for people: the cause first.'),
        ),
    ]
