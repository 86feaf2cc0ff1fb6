from django.db import migrations


def first_revisions(apps, schema_editor):
    """Every deployment made before revisions gets revision 1: what its replicas already run."""
    Deployment = apps.get_model("serving", "Deployment")
    DeploymentRevision = apps.get_model("serving", "DeploymentRevision")
    Replica = apps.get_model("serving", "Replica")
    for deployment in Deployment.objects.filter(revision__isnull=True):
        revision = DeploymentRevision.objects.create(
            deployment=deployment, number=1, checkpoint_id=deployment.checkpoint_id,
            engine_options=deployment.engine_options, tp_size=deployment.tp_size, created_by="system:migration",
        )  # fmt: skip
        deployment.revision = revision
        deployment.save(update_fields=["revision"])
        Replica.objects.filter(deployment=deployment, revision__isnull=True).update(revision=revision)


class Migration(migrations.Migration):
    dependencies = [("serving", "0003_revisions")]

    operations = [migrations.RunPython(first_revisions, migrations.RunPython.noop)]
