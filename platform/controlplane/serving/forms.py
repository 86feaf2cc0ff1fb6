from django import forms

from controlplane.checkpoints.choices import CheckpointState
from controlplane.checkpoints.models import Checkpoint
from controlplane.serving.launcher import checked_engine_options
from controlplane.serving.models import Deployment
from controlplane.serving.models.deployment import MAX_REPLICAS


class _SpecForm(forms.ModelForm):
    """What both deployment forms share: ready checkpoints only, engine options checked as `chassis
    serve` would, and ep_size / dp_size optional (left out or empty they keep their value, 1 for a
    new deployment, as in the API). Deployment.clean checks the sizes with the options and role."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["checkpoint"].queryset = Checkpoint.objects.filter(state=CheckpointState.READY)
        self.fields["engine_options"].required = False
        for name in ("ep_size", "dp_size"):
            self.fields[name].required = False

    def clean_engine_options(self):
        return checked_engine_options(self.cleaned_data.get("engine_options") or {}, forms.ValidationError)

    def clean_ep_size(self):
        return self._size_or_current("ep_size")

    def clean_dp_size(self):
        return self._size_or_current("dp_size")

    def _size_or_current(self, name: str) -> int:
        value = self.cleaned_data.get(name)
        return getattr(self.instance, name) if value is None else value


class DeploymentForm(_SpecForm):
    class Meta:
        model = Deployment
        fields = [
            "name",
            "served_model_name",
            "checkpoint",
            "replicas",
            "tp_size",
            "ep_size",
            "dp_size",
            "vendor",
            "role",
            "routing_policy",
            "engine_options",
        ]


class RevisionForm(_SpecForm):
    """What the replicas run; saving a change starts a rolling update to a new revision."""

    class Meta:
        model = Deployment
        fields = ["checkpoint", "engine_options", "tp_size", "ep_size", "dp_size"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["engine_options"].widget.attrs["rows"] = 2


class ScaleForm(forms.Form):
    replicas = forms.IntegerField(min_value=0, max_value=MAX_REPLICAS)
