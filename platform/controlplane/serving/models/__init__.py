from controlplane.serving.models.deployment import Deployment
from controlplane.serving.models.metric_sample import MetricSample
from controlplane.serving.models.replica import Replica, StaleReplicaState
from controlplane.serving.models.replica_event import ReplicaEvent

__all__ = ["Deployment", "MetricSample", "Replica", "ReplicaEvent", "StaleReplicaState"]
