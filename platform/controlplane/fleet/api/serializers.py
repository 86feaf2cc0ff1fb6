from rest_framework import serializers

from controlplane.fleet.models import Accelerator, Cluster, Node, ScaleUpDomain


class ClusterSerializer(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "description", "created"]


class ScaleUpDomainSerializer(serializers.ModelSerializer):
    class Meta:
        model = ScaleUpDomain
        fields = ["id", "cluster", "name", "interconnect", "created"]


class AcceleratorSerializer(serializers.ModelSerializer):
    node_name = serializers.CharField(source="node.name", read_only=True)
    held_by = serializers.SerializerMethodField()

    class Meta:
        model = Accelerator
        fields = [
            "id",
            "node",
            "node_name",
            "vendor",
            "model",
            "index",
            "memory_bytes",
            "health",
            "last_seen",
            "held_by",
        ]
        read_only_fields = ["last_seen"]

    def get_held_by(self, accelerator) -> list[int]:
        from controlplane.serving.choices import HOLDING_STATES

        return [replica.pk for replica in accelerator.replicas.all() if replica.state in HOLDING_STATES]


class NodeSerializer(serializers.ModelSerializer):
    queue = serializers.CharField(read_only=True)
    accelerators = AcceleratorSerializer(many=True, read_only=True)

    class Meta:
        model = Node
        fields = [
            "id", "name", "domain", "hostname", "address", "labels", "state", "state_reason",
            "last_heartbeat", "queue", "accelerators", "runtimes", "created",
        ]  # fmt: skip
        # runtimes: the engine devices its agent can drive, as the agent reported them.
        read_only_fields = ["state", "state_reason", "last_heartbeat", "runtimes"]

    def validate_labels(self, value):
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise serializers.ValidationError("must be an object of string values")
        return value
