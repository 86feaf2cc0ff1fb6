"""Deleting a checkpoint that deployments still serve is a 409 naming them, not a server error."""

import pytest
from controlplane.api.models import AuditEntry
from controlplane.checkpoints.models import Checkpoint

pytestmark = pytest.mark.django_db


def test_checkpoint_in_use_is_409_listing_its_deployments(api, make_deployment, ready_checkpoint):
    chat, batch = make_deployment("chat"), make_deployment("batch")
    client = api("admin")
    response = client.delete(f"/api/v1/checkpoints/{ready_checkpoint.pk}/")
    assert response.status_code == 409
    assert response.json()["referenced_by"] == [
        {"type": "serving.deployment", "id": chat.pk, "name": "chat"},
        {"type": "serving.deployment", "id": batch.pk, "name": "batch"},
    ]
    assert Checkpoint.objects.filter(pk=ready_checkpoint.pk).exists()
    assert not AuditEntry.objects.filter(action="delete").exists()
    chat.delete()
    batch.delete()
    assert client.delete(f"/api/v1/checkpoints/{ready_checkpoint.pk}/").status_code == 204
