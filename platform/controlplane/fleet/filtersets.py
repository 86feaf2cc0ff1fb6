import django_filters

from controlplane.fleet.models import Accelerator, Cluster, Node, ScaleUpDomain


class ClusterFilterSet(django_filters.FilterSet):
    class Meta:
        model = Cluster
        fields = {"name": ["exact", "icontains"]}


class ScaleUpDomainFilterSet(django_filters.FilterSet):
    class Meta:
        model = ScaleUpDomain
        fields = {"name": ["exact"], "cluster": ["exact"], "cluster__name": ["exact"]}


class NodeFilterSet(django_filters.FilterSet):
    class Meta:
        model = Node
        fields = {"name": ["exact", "icontains"], "state": ["exact", "in"], "domain": ["exact"]}


class AcceleratorFilterSet(django_filters.FilterSet):
    class Meta:
        model = Accelerator
        fields = {"node": ["exact"], "node__name": ["exact"], "vendor": ["exact"], "health": ["exact"]}
