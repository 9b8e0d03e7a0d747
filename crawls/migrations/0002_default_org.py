from django.db import migrations


def create_default_org(apps, schema_editor):
    Org = apps.get_model("crawls", "Org")
    Org.objects.get_or_create(slug="default", defaults={"name": "Default"})


class Migration(migrations.Migration):
    dependencies = [("crawls", "0001_initial")]
    operations = [migrations.RunPython(create_default_org, migrations.RunPython.noop)]
