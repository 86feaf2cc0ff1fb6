import django_filters

from controlplane.serving.choices import ReplicaState
from controlplane.serving.models import Deployment, MetricSample, Replica, ReplicaEvent


class DeploymentFilterSet(django_filters.FilterSet):
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


class ReplicaFilterSet(django_filters.FilterSet):
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


class ReplicaEventFilterSet(django_filters.FilterSet):
    class Meta:
        model = ReplicaEvent
        fields = {
            "replica": ["exact"],
            "replica__deployment": ["exact"],
            "to_state": ["exact"],
            "actor": ["exact"],
            "at": ["gte", "lte"],
        }


class MetricSampleFilterSet(django_filters.FilterSet):
    class Meta:
        model = MetricSample
        fields = {"replica": ["exact"], "replica__deployment": ["exact"], "at": ["gte", "lte"]}
