from rest_framework import serializers

from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule

PARAMETERS = ["workload", "requests", "concurrency", "max_tokens", "seed"]


class ParametersValidation:
    """The cross-field rule of LoadParameters, answered as a 400 naming the field."""

    def validate(self, attrs):
        requests = attrs.get("requests", getattr(self.instance, "requests", None))
        concurrency = attrs.get("concurrency", getattr(self.instance, "concurrency", None))
        if requests and concurrency and concurrency > requests:
            raise serializers.ValidationError({"concurrency": [f"must not exceed requests ({requests})"]})
        return attrs


class BenchmarkRunSerializer(ParametersValidation, serializers.ModelSerializer):
    deployment_name = serializers.CharField(source="deployment.name", read_only=True)
    progress_pct = serializers.IntegerField(read_only=True)

    class Meta:
        model = BenchmarkRun
        fields = [
            "id", "deployment", "deployment_name", *PARAMETERS, "schedule", "due_slot", "state", "reason",
            "created", "started_at", "finished_at", "heartbeat_at", "targets", "completed", "failed_requests",
            "progress_pct", "results", "samples", "created_by",
        ]  # fmt: skip
        read_only_fields = [
            "schedule", "due_slot", "state", "reason", "started_at", "finished_at", "heartbeat_at", "targets",
            "completed", "failed_requests", "results", "samples", "created_by",
        ]  # fmt: skip


class BenchmarkScheduleSerializer(ParametersValidation, serializers.ModelSerializer):
    deployment_name = serializers.CharField(source="deployment.name", read_only=True)
    last_run = serializers.SerializerMethodField()

    class Meta:
        model = BenchmarkSchedule
        fields = [
            "id", "name", "deployment", "deployment_name", *PARAMETERS, "interval_minutes", "enabled",
            "starts_at", "last_run", "created_by", "created", "updated",
        ]  # fmt: skip
        read_only_fields = ["created_by"]

    def get_last_run(self, schedule) -> dict | None:
        run = schedule.runs.order_by("-created", "-id").first()
        if run is None:
            return None
        return {"id": run.pk, "state": run.state, "created": run.created, "results": run.results}
