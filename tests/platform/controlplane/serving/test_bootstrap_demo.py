"""`bootstrap_demo` (run by `chassis up`): SmolLM2 by default, the tiny checkpoint on request."""

from io import StringIO

import pytest
from controlplane.checkpoints.models import Checkpoint
from controlplane.serving.models import Deployment
from django.core.management import call_command

from engine.testing.smollm2 import smollm2_path

pytestmark = pytest.mark.django_db


def test_the_demo_serves_smollm2_by_default():
    call_command("bootstrap_demo", stdout=StringIO())
    deployment = Deployment.objects.get()
    assert deployment.name == deployment.served_model_name == "smollm2-chat"
    assert deployment.checkpoint.name == "smollm2-135m-instruct"
    assert deployment.checkpoint.path == str(smollm2_path())
    call_command("bootstrap_demo", stdout=StringIO())  # idempotent
    assert Deployment.objects.count() == Checkpoint.objects.count() == 1


def test_the_tiny_demo_is_generated_on_request(tmp_path):
    call_command(
        "bootstrap_demo", "--model", "tiny", "--model-dir", str(tmp_path / "tiny"), stdout=StringIO()
    )
    deployment = Deployment.objects.get()
    assert (deployment.name, deployment.checkpoint.name) == ("tiny-chat", "tiny")
    assert (tmp_path / "tiny" / "config.json").is_file()


def test_the_demo_runs_smollm2_on_the_engine_defaults():
    """Float32, weights dequantized: the 4-bit bfloat16 model's answer to the README's question is a
    near-tie that differs between CPU types (bootstrap_demo's docstring)."""
    call_command("bootstrap_demo", stdout=StringIO())
    assert Deployment.objects.get().engine_options == {}
