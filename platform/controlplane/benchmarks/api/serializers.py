from rest_framework import serializers

from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule
from controlplane.benchmarks.models.parameters import sweep_errors
from controlplane.serving.models import Deployment

PARAMETERS = ["workload", "requests", "concurrency", "max_tokens", "seed"]


class ParametersValidation:
    """The cross-field rule of LoadParameters, answered as a 400 naming the field; a deployment is
    required to write one (it reads as null once deleted)."""

    def validate_deployment(self, deployment):
        if deployment is None:
            raise serializers.ValidationError("choose a deployment")
        return deployment

    def validate(self, attrs):
        requests = attrs.get("requests", getattr(self.instance, "requests", None))
        concurrency = attrs.get("concurrency", getattr(self.instance, "concurrency", None))
        if requests and concurrency and concurrency > requests:
            raise serializers.ValidationError({"concurrency": [f"must not exceed requests ({requests})"]})
        return attrs


class BenchmarkRunSerializer(ParametersValidation, serializers.ModelSerializer):
    # Null once the deployment is deleted (the row keeps deployment_name); never null when written.
    deployment = serializers.PrimaryKeyRelatedField(queryset=Deployment.objects.all(), allow_null=True)
    progress_pct = serializers.IntegerField(read_only=True)
    total_requests = serializers.IntegerField(read_only=True)
    sweep = serializers.JSONField(
        required=False,
        help_text='A grid measured point by point, `requests` each: {"concurrency": [1, 2, 4], '
        '"input_tokens": [32, 128], "output_tokens": [16, 64]}; omit for one load.',
    )
    conditions = serializers.JSONField(
        read_only=True,
        help_text="Recorded when the run starts, never changed: deployment, checkpoint (id, digest, "
        "architecture), engine options and the engine_config the replicas resolved, tp_size, dtype, "
        "replicas, accelerators (model, memory, interconnect, scale-up domain), routing policy, "
        "versions (engine, torch, triton, driver, python, code revision) and the workload with its seed.",
    )
    conditions_diff = serializers.JSONField(
        read_only=True, help_text="For a reproduction: [{key, before, after}] against the run it reproduces."
    )

    def validate_sweep(self, sweep):
        errors = sweep_errors(sweep)
        if errors:
            raise serializers.ValidationError(errors)
        return sweep or {}

    def validate(self, attrs):
        attrs = super().validate(attrs)
        sweep, requests = attrs.get("sweep"), attrs.get("requests")
        if sweep and requests and max(sweep["concurrency"]) > requests:
            raise serializers.ValidationError(
                {"sweep": [f"concurrency must not exceed requests ({requests})"]}
            )
        return attrs

    class Meta:
        model = BenchmarkRun
        fields = [
            "id", "deployment", "deployment_name", *PARAMETERS, "sweep", "schedule", "due_slot", "state",
            "reason", "created", "started_at", "finished_at", "heartbeat_at", "targets", "completed",
            "failed_requests", "total_requests", "progress_pct", "results", "samples", "conditions",
            "reproduced_from", "conditions_diff", "created_by",
        ]  # fmt: skip
        read_only_fields = [
            "deployment_name", "schedule", "due_slot", "state", "reason", "started_at", "finished_at",
            "heartbeat_at", "targets", "completed", "failed_requests", "results", "samples", "reproduced_from",
            "created_by",
        ]  # fmt: skip


class ReproduceSerializer(serializers.Serializer):
    deployment = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Deployment.objects.all(),
        help_text="The deployment to run it on, by name.",
    )
    preview = serializers.BooleanField(
        default=False, help_text="Only answer the conditions diff; start nothing."
    )


class ReproducePreviewSerializer(serializers.Serializer):
    source = serializers.IntegerField()
    deployment = serializers.CharField()
    conditions_diff = serializers.JSONField()


class BenchmarkScheduleSerializer(ParametersValidation, serializers.ModelSerializer):
    # Null once the deployment is deleted (the row keeps deployment_name); never null when written.
    deployment = serializers.PrimaryKeyRelatedField(queryset=Deployment.objects.all(), allow_null=True)
    last_run = serializers.SerializerMethodField()

    class Meta:
        model = BenchmarkSchedule
        fields = [
            "id", "name", "deployment", "deployment_name", *PARAMETERS, "interval_minutes", "enabled",
            "starts_at", "last_run", "created_by", "created", "updated",
        ]  # fmt: skip
        read_only_fields = ["deployment_name", "created_by"]

    def validate(self, attrs):
        attrs = super().validate(attrs)
        deployment = attrs.get("deployment", getattr(self.instance, "deployment", None))
        if attrs.get("enabled") and deployment is None and self.instance is not None:
            name = self.instance.deployment_name
            raise serializers.ValidationError(
                {"enabled": [f"deployment {name} was deleted; nothing to run on"]}
            )
        return attrs

    def get_last_run(self, schedule) -> dict | None:
        run = schedule.runs.order_by("-created", "-id").first()
        if run is None:
            return None
        return {"id": run.pk, "state": run.state, "created": run.created, "results": run.results}
