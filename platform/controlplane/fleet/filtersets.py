from controlplane.api.filtersets import ChassisFilterSet
from controlplane.fleet.models import Accelerator, Cluster, Node, ScaleUpDomain


class ClusterFilterSet(ChassisFilterSet):
    class Meta:
        model = Cluster
        fields = {"name": ["exact", "icontains"]}


class ScaleUpDomainFilterSet(ChassisFilterSet):
    class Meta:
        model = ScaleUpDomain
        fields = {"name": ["exact"], "cluster": ["exact"], "cluster__name": ["exact"]}


class NodeFilterSet(ChassisFilterSet):
    class Meta:
        model = Node
        fields = {"name": ["exact", "icontains"], "state": ["exact", "in"], "domain": ["exact"]}


class AcceleratorFilterSet(ChassisFilterSet):
    class Meta:
        model = Accelerator
        fields = {"node": ["exact"], "node__name": ["exact"], "vendor": ["exact"], "health": ["exact"]}
