from controlplane.serving.models.deployment import Deployment
from controlplane.serving.models.metric_sample import MetricSample
from controlplane.serving.models.replica import Replica, StaleReplicaState
from controlplane.serving.models.replica_event import ReplicaEvent
from controlplane.serving.models.revision import DeploymentRevision

__all__ = ["Deployment", "DeploymentRevision", "MetricSample", "Replica", "ReplicaEvent", "StaleReplicaState"]
