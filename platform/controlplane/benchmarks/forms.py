from django import forms

from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule

PARAMETERS = ["workload", "requests", "concurrency", "max_tokens", "seed"]


class BenchmarkRunForm(forms.ModelForm):
    class Meta:
        model = BenchmarkRun
        fields = ["deployment", *PARAMETERS]


class BenchmarkScheduleForm(forms.ModelForm):
    class Meta:
        model = BenchmarkSchedule
        fields = ["name", "deployment", *PARAMETERS, "interval_minutes", "enabled"]
