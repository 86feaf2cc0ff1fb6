"""Fixtures shared by the control-plane tests: a tiny checkpoint, a fleet, users with API tokens."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_checkpoint):
    """The suite's served tiny qwen3 checkpoint (tests/support/checkpoints.py)."""
    return tiny_checkpoint


@pytest.fixture
def make_node(db):
    from controlplane.fleet.inventory import AcceleratorInfo
    from controlplane.fleet.services import register_node

    def make(name: str, vendor: str = "nvidia", count: int = 8, domain: str | None = None, runtimes=None):
        accelerators = [
            AcceleratorInfo(vendor, f"{vendor}-test", index, 80 * 2**30) for index in range(count)
        ]
        return register_node(
            name, hostname=name, address="127.0.0.1", domain=domain, accelerators=accelerators,
            runtimes=runtimes,
        )  # fmt: skip

    return make


@pytest.fixture
def ready_checkpoint(db, tmp_path):
    from controlplane.checkpoints.models import Checkpoint

    checkpoint = Checkpoint.objects.create(name="tiny", path=str(tmp_path))
    checkpoint.start_validation()
    checkpoint.mark_ready({"architecture": "Qwen3ForCausalLM", "parameter_count": 1000})
    return checkpoint


@pytest.fixture
def make_deployment(ready_checkpoint):
    from controlplane.serving.models import Deployment

    def make(name: str = "chat", **fields):
        return Deployment.objects.create(name=name, checkpoint=ready_checkpoint, **fields)

    return make


@pytest.fixture
def login(client):
    """login(role) -> Django's test client, logged in to the UI as a new user holding ``role``."""
    from controlplane.api.roles import set_role
    from django.contrib.auth import get_user_model

    def as_role(role):
        user = get_user_model().objects.create_user(f"{role}-ui", password="pw-for-tests-123")
        set_role(user, role)
        client.force_login(user)
        return client

    return as_role


@pytest.fixture
def tokens(db):
    """role -> bearer token, one user per role."""
    from django.core.management import call_command

    found = {}
    for role in ("viewer", "operator", "admin"):
        from io import StringIO

        out = StringIO()
        call_command("create_api_token", f"{role}-user", "--role", role, stdout=out)
        found[role] = out.getvalue().strip()
    return found


@pytest.fixture
def api(tokens):
    """api(role) -> a DRF APIClient sending that role's bearer token (role None: no token)."""
    from rest_framework.test import APIClient

    def client(role: str | None):
        c = APIClient()
        if role:
            c.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens[role]}")
        return c

    return client
