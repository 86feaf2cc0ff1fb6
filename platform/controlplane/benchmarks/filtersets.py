import django_filters

from controlplane.benchmarks.choices import RunState, Workload
from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule


class BenchmarkRunFilterSet(django_filters.FilterSet):
    state = django_filters.MultipleChoiceFilter(choices=RunState.choices)
    workload = django_filters.MultipleChoiceFilter(choices=Workload.choices)
    regressed = django_filters.BooleanFilter(field_name="results__regressed")

    class Meta:
        model = BenchmarkRun
        fields = {
            "deployment": ["exact"],
            "deployment__name": ["exact"],
            "schedule": ["exact", "isnull"],
            "created": ["gte", "lte"],
        }


class BenchmarkScheduleFilterSet(django_filters.FilterSet):
    class Meta:
        model = BenchmarkSchedule
        fields = {
            "name": ["exact", "icontains"],
            "deployment": ["exact"],
            "workload": ["exact"],
            "enabled": ["exact"],
        }
