import django_filters

from controlplane.api.filtersets import ChassisFilterSet
from controlplane.benchmarks.choices import RunState, Workload
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule


class BenchmarkRunFilterSet(ChassisFilterSet):
    state = django_filters.MultipleChoiceFilter(choices=RunState.choices)
    workload = django_filters.MultipleChoiceFilter(choices=Workload.choices)
    regressed = django_filters.BooleanFilter(field_name="results__regressed")

    class Meta:
        model = BenchmarkRun
        fields = {
            "deployment": ["exact"],
            "deployment__name": ["exact"],
            "deployment_name": ["exact"],
            "schedule": ["exact", "isnull"],
            "reproduced_from": ["exact"],
            "created": ["gte", "lte"],
        }


class BenchmarkScheduleFilterSet(ChassisFilterSet):
    class Meta:
        model = BenchmarkSchedule
        fields = {
            "name": ["exact", "icontains"],
            "deployment": ["exact", "isnull"],
            "workload": ["exact"],
            "enabled": ["exact"],
        }
