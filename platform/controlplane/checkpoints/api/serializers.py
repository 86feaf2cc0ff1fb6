from rest_framework import serializers

from controlplane.checkpoints.models import Checkpoint


class CheckpointSerializer(serializers.ModelSerializer):
    kv_tokens_per_gib = serializers.IntegerField(read_only=True, allow_null=True)
    memory_per_device_bytes_by_tp = serializers.DictField(
        child=serializers.IntegerField(),
        read_only=True,
        help_text="Tensor-parallel size -> one device's share of the weights plus the KV cache of one "
        "max_context sequence.",
    )

    class Meta:
        model = Checkpoint
        fields = [
            "id", "name", "revision", "path", "state", "reason", "architecture", "parameter_count",
            "active_parameter_count", "dtype", "size_bytes", "weight_bytes", "digest", "kv_bytes_per_token",
            "kv_tokens_per_gib", "max_context", "memory_per_replica_bytes", "memory_per_device_bytes_by_tp",
            "details", "validated_at", "created",
        ]  # fmt: skip
        read_only_fields = [name for name in fields if name not in ("name", "revision", "path")]

    def validate_path(self, value: str) -> str:
        if not value.startswith("/"):
            raise serializers.ValidationError("must be an absolute path on the nodes")
        return value

    def update(self, instance, validated_data):
        if (
            "path" in validated_data
            and validated_data["path"] != instance.path
            and instance.deployments.exists()
        ):
            raise serializers.ValidationError(
                {"path": ["deployments use this checkpoint; register a new revision"]}
            )
        return super().update(instance, validated_data)
