from django.contrib import admin

from controlplane.checkpoints.models import Checkpoint


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    """Validation sets the facts and the state; this form edits only what an operator registers."""

    list_display = ["name", "revision", "state", "architecture", "dtype", "path", "validated_at"]
    list_filter = ["state", "architecture"]
    search_fields = ["name", "path", "architecture"]
    readonly_fields = [
        field.name
        for field in Checkpoint._meta.fields
        if field.name not in ("id", "name", "revision", "path")
    ]
