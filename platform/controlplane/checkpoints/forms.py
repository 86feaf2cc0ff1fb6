from django import forms

from controlplane.checkpoints.models import Checkpoint


class CheckpointForm(forms.ModelForm):
    class Meta:
        model = Checkpoint
        fields = ["name", "revision", "path"]

    def clean_path(self):
        path = self.cleaned_data["path"]
        if not path.startswith("/"):
            raise forms.ValidationError("must be an absolute path on the nodes")
        return path
