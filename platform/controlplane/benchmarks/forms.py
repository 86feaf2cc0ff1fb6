from django import forms

from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule
from controlplane.benchmarks.models.parameters import sweep_errors
from controlplane.serving.models import Deployment

PARAMETERS = ["workload", "requests", "concurrency", "max_tokens", "seed"]
SWEEP_FIELDS = {
    "sweep_concurrency": "concurrency",
    "sweep_input_tokens": "input_tokens",
    "sweep_output_tokens": "output_tokens",
}


def _integers(text: str) -> list[int] | None:
    parts = [part.strip() for part in text.replace(" ", ",").split(",") if part.strip()]
    return [int(part) for part in parts] if all(part.isdigit() for part in parts) else None


class BenchmarkRunForm(forms.ModelForm):
    """One load, or a sweep when the three grid fields are filled (comma-separated integers)."""

    sweep_concurrency = forms.CharField(
        required=False,
        label="sweep: concurrencies",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 1,2,4"}),
    )
    sweep_input_tokens = forms.CharField(
        required=False,
        label="sweep: input lengths",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 32,128"}),
    )
    sweep_output_tokens = forms.CharField(
        required=False,
        label="sweep: output lengths",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 16,64"}),
    )

    class Meta:
        model = BenchmarkRun
        fields = ["deployment", *PARAMETERS]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["deployment"].required = True

    def clean(self):
        cleaned = super().clean()
        given = {axis: cleaned.get(name, "") for name, axis in SWEEP_FIELDS.items()}
        if not any(given.values()):
            self.instance.sweep = {}
            return cleaned
        sweep = {}
        for name, axis in SWEEP_FIELDS.items():
            values = _integers(given[axis])
            if not values:
                self.add_error(name, "give comma-separated whole numbers")
            sweep[axis] = values
        if self.errors:
            return cleaned
        for error in sweep_errors(sweep):
            self.add_error(None, f"sweep: {error}")
        requests = cleaned.get("requests")
        if requests and max(sweep["concurrency"]) > requests:
            self.add_error("sweep_concurrency", f"must not exceed requests ({requests})")
        cleaned["sweep"] = sweep
        return cleaned

    def run_fields(self) -> dict:
        fields = {name: self.cleaned_data[name] for name in ["deployment", *PARAMETERS]}
        return {**fields, "sweep": self.cleaned_data.get("sweep", {})}


class ReproduceForm(forms.Form):
    deployment = forms.ModelChoiceField(queryset=Deployment.objects.order_by("name"), to_field_name="name")


class BenchmarkScheduleForm(forms.ModelForm):
    class Meta:
        model = BenchmarkSchedule
        fields = ["name", "deployment", *PARAMETERS, "interval_minutes", "enabled"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["deployment"].required = True
