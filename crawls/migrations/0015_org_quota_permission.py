from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("crawls", "0014_stop_reason_redis_budget"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="org",
            options={"ordering": ["slug"], "permissions": [("change_org_quotas", "Can change an org's quotas")]},
        ),
    ]
