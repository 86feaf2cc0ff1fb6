from controlplane.fleet.models.accelerator import Accelerator
from controlplane.fleet.models.cluster import Cluster
from controlplane.fleet.models.node import Node
from controlplane.fleet.models.scale_up_domain import ScaleUpDomain

__all__ = ["Accelerator", "Cluster", "Node", "ScaleUpDomain"]
