from django.apps import AppConfig


class CheckpointsConfig(AppConfig):
    name = "controlplane.checkpoints"
    label = "checkpoints"
    verbose_name = "Checkpoints"
