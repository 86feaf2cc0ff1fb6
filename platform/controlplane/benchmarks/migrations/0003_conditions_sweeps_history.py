import django.db.models.deletion
from django.db import migrations, models


def snapshot_deployment_names(apps, schema_editor):
    for model_name in ("BenchmarkRun", "BenchmarkSchedule"):
        model = apps.get_model("benchmarks", model_name)
        for row in model.objects.filter(deployment__isnull=False).select_related("deployment"):
            model.objects.filter(pk=row.pk).update(deployment_name=row.deployment.name)


class Migration(migrations.Migration):
    dependencies = [
        ("benchmarks", "0002_run_heartbeat"),
        ("serving", "0002_routing_policy_session"),
    ]

    operations = [
        migrations.AddField(
            model_name="benchmarkrun",
            name="deployment_name",
            field=models.CharField(blank=True, editable=False, max_length=100),
        ),
        migrations.AddField(
            model_name="benchmarkschedule",
            name="deployment_name",
            field=models.CharField(blank=True, editable=False, max_length=100),
        ),
        migrations.RunPython(snapshot_deployment_names, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="benchmarkrun",
            name="deployment",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="benchmark_runs",
                to="serving.deployment",
            ),
        ),
        migrations.AlterField(
            model_name="benchmarkschedule",
            name="deployment",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="benchmark_schedules",
                to="serving.deployment",
            ),
        ),
        migrations.AddField(
            model_name="benchmarkrun",
            name="sweep",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text='A grid run once per point: {"concurrency": [...], "input_tokens": [...], '
                '"output_tokens": [...]}; empty for a single load.',
            ),
        ),
        migrations.AddField(
            model_name="benchmarkrun",
            name="conditions",
            field=models.JSONField(
                blank=True, default=dict, help_text="Everything it ran on, recorded once when it starts."
            ),
        ),
        migrations.AddField(
            model_name="benchmarkrun",
            name="reproduced_from",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="reproductions",
                to="benchmarks.benchmarkrun",
            ),
        ),
        migrations.AddField(
            model_name="benchmarkrun",
            name="conditions_diff",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="A reproduction's conditions that differ from the run it reproduces: "
                "[{key, before, after}], shown before it starts and replaced by the measured ones when it does.",
            ),
        ),
    ]
