from django import forms

from controlplane.checkpoints.choices import CheckpointState
from controlplane.checkpoints.models import Checkpoint
from controlplane.serving.launcher import checked_engine_options
from controlplane.serving.models import Deployment
from controlplane.serving.models.deployment import MAX_REPLICAS


class DeploymentForm(forms.ModelForm):
    class Meta:
        model = Deployment
        fields = [
            "name",
            "served_model_name",
            "checkpoint",
            "replicas",
            "tp_size",
            "vendor",
            "role",
            "routing_policy",
            "engine_options",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["checkpoint"].queryset = Checkpoint.objects.filter(state=CheckpointState.READY)
        self.fields["engine_options"].required = False

    def clean_engine_options(self):
        return checked_engine_options(self.cleaned_data.get("engine_options") or {}, forms.ValidationError)


class RevisionForm(forms.ModelForm):
    """What the replicas run; saving a change starts a rolling update to a new revision."""

    class Meta:
        model = Deployment
        fields = ["checkpoint", "engine_options", "tp_size"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["checkpoint"].queryset = Checkpoint.objects.filter(state=CheckpointState.READY)
        self.fields["engine_options"].required = False
        self.fields["engine_options"].widget.attrs["rows"] = 2

    def clean_engine_options(self):
        return checked_engine_options(self.cleaned_data.get("engine_options") or {}, forms.ValidationError)


class ScaleForm(forms.Form):
    replicas = forms.IntegerField(min_value=0, max_value=MAX_REPLICAS)
