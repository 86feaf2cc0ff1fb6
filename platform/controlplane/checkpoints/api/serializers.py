from rest_framework import serializers

from controlplane.checkpoints.models import Checkpoint


class CheckpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = Checkpoint
        fields = [
            "id", "name", "revision", "path", "state", "reason", "architecture", "parameter_count", "dtype",
            "size_bytes", "digest", "kv_bytes_per_token", "max_context", "memory_per_replica_bytes",
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
