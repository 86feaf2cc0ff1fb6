from rest_framework import serializers

from controlplane.checkpoints.choices import CheckpointState
from controlplane.serving.launcher import checked_engine_options
from controlplane.serving.models import Deployment, DeploymentRevision, MetricSample, Replica, ReplicaEvent
from controlplane.serving.models.deployment import MAX_REPLICAS


class DeploymentSerializer(serializers.ModelSerializer):
    ready_replicas = serializers.IntegerField(read_only=True)
    revision = serializers.IntegerField(
        source="revision.number", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = Deployment
        fields = [
            "id", "name", "served_model_name", "checkpoint", "engine_options", "replicas", "ready_replicas",
            "tp_size", "vendor", "role", "routing_policy", "placement_status", "placement_reason",
            "revision", "rollout_status", "rollout_reason", "created", "updated",
        ]  # fmt: skip
        read_only_fields = ["placement_status", "placement_reason", "rollout_status", "rollout_reason"]

    def validate_checkpoint(self, checkpoint):
        if checkpoint.state != CheckpointState.READY:
            raise serializers.ValidationError(
                f"checkpoint {checkpoint} is {checkpoint.state}; it must be ready"
            )
        return checkpoint

    def validate_engine_options(self, value):
        return checked_engine_options(value, serializers.ValidationError)


class ScaleSerializer(serializers.Serializer):
    replicas = serializers.IntegerField(min_value=0, max_value=MAX_REPLICAS)


class ReplicaChoiceSerializer(serializers.Serializer):
    replica = serializers.IntegerField(help_text="Primary key of one of this deployment's replicas.")


class RestartSerializer(serializers.Serializer):
    replica = serializers.IntegerField(
        required=False, help_text="Primary key of one replica; leave out to restart every replica."
    )


class RollbackSerializer(serializers.Serializer):
    revision = serializers.IntegerField(
        required=False, min_value=1, help_text="Revision number; leave out for the one before the current."
    )


class DeploymentRevisionSerializer(serializers.ModelSerializer):
    dtype = serializers.CharField(read_only=True, allow_null=True)

    class Meta:
        model = DeploymentRevision
        fields = ["id", "deployment", "number", "checkpoint", "engine_options", "tp_size", "dtype", "created",
                  "created_by"]  # fmt: skip
        read_only_fields = fields


class ReplicaSerializer(serializers.ModelSerializer):
    """What the gateway reads: ready replicas' base URLs per served model name."""

    name = serializers.CharField(source="__str__", read_only=True)
    url = serializers.CharField(read_only=True, allow_null=True)
    deployment_name = serializers.CharField(source="deployment.name", read_only=True)
    served_model_name = serializers.CharField(source="deployment.served_model_name", read_only=True)
    role = serializers.CharField(source="deployment.role", read_only=True)
    routing_policy = serializers.CharField(source="deployment.routing_policy", read_only=True)
    node_name = serializers.CharField(source="node.name", read_only=True, allow_null=True, default=None)
    revision = serializers.IntegerField(
        source="revision.number", read_only=True, allow_null=True, default=None
    )

    class Meta:
        model = Replica
        fields = [
            "id", "uid", "name", "deployment", "deployment_name", "served_model_name", "role", "routing_policy",
            "state", "reason", "state_changed_at", "node", "node_name", "accelerators", "host", "port", "url",
            "pid", "launch_attempts", "next_attempt_at", "revision", "replace_requested", "created",
        ]  # fmt: skip
        read_only_fields = fields


class ReplicaEventSerializer(serializers.ModelSerializer):
    replica_name = serializers.CharField(source="replica.__str__", read_only=True)

    class Meta:
        model = ReplicaEvent
        fields = ["id", "replica", "replica_name", "at", "from_state", "to_state", "reason", "actor"]
        read_only_fields = fields


class MetricSampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = MetricSample
        fields = [
            "id", "replica", "at", "ttft_p50_s", "tokens_per_s", "prefix_cache_hit_rate", "requests_running",
            "kv_cache_usage", "generation_tokens_total", "prompt_tokens_total",
        ]  # fmt: skip
        read_only_fields = fields
