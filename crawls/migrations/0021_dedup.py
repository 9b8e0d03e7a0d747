import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("crawls", "0020_diff"),
    ]

    operations = [
        migrations.AddField(
            model_name="crawlfile",
            name="payloads_indexed",
            field=models.BooleanField(default=False, help_text="Its payload digests and dependencies are recorded (dedup)."),
        ),
        migrations.CreateModel(
            name="PayloadDigest",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("digest", models.CharField(help_text="WARC-Payload-Digest, e.g. sha1:<base32>.", max_length=80)),
                ("url", models.TextField()),
                ("date", models.CharField(help_text="WARC-Date of the record holding it.", max_length=32)),
                ("crawl_file", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="payloads", to="crawls.crawlfile")),
                ("org", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="payload_digests", to="crawls.org")),
            ],
            options={"constraints": [models.UniqueConstraint(fields=("org", "digest"), name="payload_org_digest")]},
        ),
        migrations.CreateModel(
            name="FileDependency",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("file", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="requires_links", to="crawls.crawlfile")),
                ("required", models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name="required_by_links", to="crawls.crawlfile")),
            ],
            options={"constraints": [models.UniqueConstraint(fields=("file", "required"), name="dependency_once")]},
        ),
    ]
