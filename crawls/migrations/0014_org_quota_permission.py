from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("crawls", "0013_process_exit_unreported"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="org",
            options={"ordering": ["slug"], "permissions": [("change_org_quotas", "Can change an org's quotas")]},
        ),
    ]
