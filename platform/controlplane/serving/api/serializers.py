from rest_framework import serializers

from controlplane.checkpoints.choices import CheckpointState
from controlplane.serving.choices import Role
from controlplane.serving.launcher import checked_engine_options, size_errors
from controlplane.serving.models import Deployment, DeploymentRevision, MetricSample, Replica, ReplicaEvent
from controlplane.serving.models.deployment import MAX_REPLICAS


class DeploymentSerializer(serializers.ModelSerializer):
    ready_replicas = serializers.IntegerField(read_only=True)
    revision = serializers.IntegerField(
        source="revision.number", read_only=True, allow_null=True, default=None
    )
    world_size = serializers.IntegerField(
        read_only=True,
        help_text="Accelerators one replica holds: tp_size × ep_size, on one node of one scale-up domain.",
    )
    role_groups = serializers.SerializerMethodField(
        help_text="Prefill/decode disaggregation: the deployments serving this served_model_name, by "
        "role, with their desired replicas (a prefill and a decode deployment of one name form a "
        "disaggregated model at the gateway; each scales and is placed on its own)."
    )

    class Meta:
        model = Deployment
        fields = [
            "id", "name", "served_model_name", "checkpoint", "engine_options", "replicas", "ready_replicas",
            "tp_size", "ep_size", "dp_size", "world_size", "vendor", "role", "routing_policy",
            "placement_status", "placement_reason", "revision", "rollout_status", "rollout_reason",
            "role_groups", "created", "updated",
        ]  # fmt: skip
        read_only_fields = ["placement_status", "placement_reason", "rollout_status", "rollout_reason"]

    def get_role_groups(self, deployment) -> dict[str, dict]:
        return role_groups(deployment.served_model_name)

    def validate(self, attrs):
        def current(name, default):
            return attrs.get(name, getattr(self.instance, name, default))

        role = current("role", Role.MIXED)
        options = current("engine_options", {}) or {}
        tp_size = current("tp_size", 1)
        if role != Role.MIXED:
            if options.get("enable_prefix_caching") is False:
                raise serializers.ValidationError(
                    {
                        "role": f"a {role} deployment moves KV through the prefix cache: leave prefix caching on"
                    }
                )
            if tp_size != 1:
                raise serializers.ValidationError(
                    {"role": f"a {role} deployment needs tp_size 1 (KV tiers work with one rank for now)"}
                )
        errors = size_errors(
            options, tp_size=tp_size, ep_size=current("ep_size", 1), dp_size=current("dp_size", 1), role=role
        )
        if errors:
            raise serializers.ValidationError(errors)
        return attrs

    def validate_checkpoint(self, checkpoint):
        if checkpoint.state != CheckpointState.READY:
            raise serializers.ValidationError(
                f"checkpoint {checkpoint} is {checkpoint.state}; it must be ready"
            )
        return checkpoint

    def validate_engine_options(self, value):
        return checked_engine_options(value, serializers.ValidationError)


def role_groups(served_model_name: str) -> dict[str, dict]:
    """role -> {"deployments": names, "replicas": desired replicas} for one served model name."""
    groups: dict[str, dict] = {}
    for name, role, replicas in Deployment.objects.filter(served_model_name=served_model_name).values_list(
        "name", "role", "replicas"
    ):
        group = groups.setdefault(role, {"deployments": [], "replicas": 0})
        group["deployments"].append(name)
        group["replicas"] += replicas
    return groups


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
        fields = ["id", "deployment", "number", "checkpoint", "engine_options", "tp_size", "ep_size", "dp_size",
                  "dtype", "created", "created_by"]  # fmt: skip
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
            "kv_cache_usage", "generation_tokens_total", "prompt_tokens_total", "kv_tiers",
            "accelerators", "accelerator_hour_price", "busy_seconds", "spec_acceptance_rate",
            "spec_mean_accepted_length", "spec_decode_drafts_total", "spec_decode_draft_tokens_total",
            "spec_decode_accepted_tokens_total",
        ]  # fmt: skip
        read_only_fields = fields
