"""Deleting a cluster whose domains still hold nodes is a 409 naming the nodes, not a server error."""

import pytest
from controlplane.fleet.models import Cluster

pytestmark = pytest.mark.django_db


def test_cluster_with_nodes_is_409_listing_them(api, make_node):
    node = make_node("n1", count=1)
    cluster = node.domain.cluster
    client = api("admin")
    response = client.delete(f"/api/v1/clusters/{cluster.pk}/")
    assert response.status_code == 409
    body = response.json()
    assert body["detail"] and body["referenced_by"] == [{"type": "fleet.node", "id": node.pk, "name": "n1"}]
    assert Cluster.objects.filter(pk=cluster.pk).exists()
    assert client.get(f"/api/v1/clusters/{cluster.pk}/").status_code == 200
    node.delete()
    assert client.delete(f"/api/v1/clusters/{cluster.pk}/").status_code == 204
