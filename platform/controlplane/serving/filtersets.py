import django_filters

from controlplane.api.filtersets import ChassisFilterSet
from controlplane.serving.choices import ReplicaState
from controlplane.serving.models import Deployment, MetricSample, Replica, ReplicaEvent


class DeploymentFilterSet(ChassisFilterSet):
    class Meta:
        model = Deployment
        fields = {
            "name": ["exact", "icontains"],
            "served_model_name": ["exact"],
            "checkpoint": ["exact"],
            "vendor": ["exact"],
            "role": ["exact"],
            "placement_status": ["exact"],
        }


class ReplicaFilterSet(ChassisFilterSet):
    state = django_filters.MultipleChoiceFilter(choices=ReplicaState.choices)
    served_model_name = django_filters.CharFilter(field_name="deployment__served_model_name")

    class Meta:
        model = Replica
        fields = {
            "deployment": ["exact"],
            "deployment__name": ["exact"],
            "node": ["exact"],
            "node__name": ["exact"],
        }


class ReplicaEventFilterSet(ChassisFilterSet):
    class Meta:
        model = ReplicaEvent
        fields = {
            "replica": ["exact"],
            "replica__deployment": ["exact"],
            "to_state": ["exact"],
            "actor": ["exact"],
            "at": ["gte", "lte"],
        }


class MetricSampleFilterSet(ChassisFilterSet):
    class Meta:
        model = MetricSample
        fields = {"replica": ["exact"], "replica__deployment": ["exact"], "at": ["gte", "lte"]}
