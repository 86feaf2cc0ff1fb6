"""The operator UI through Django's test client: role gating, inline form errors, chart data."""

import pytest

pytestmark = pytest.mark.django_db


def test_login_required(client):
    response = client.get("/deployments/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")


def test_viewer_sees_no_actions_and_cannot_post(login, make_deployment, make_node):
    from controlplane.serving.reconciler import reconcile_deployment

    make_node("n1")
    deployment = make_deployment(replicas=1, vendor="nvidia")
    reconcile_deployment(deployment.pk, "t")
    client = login("viewer")
    for url in ("/", "/checkpoints/", "/deployments/", f"/deployments/{deployment.pk}/"):
        page = client.get(url).content.decode()
        actions = page.replace('<button type="submit">Log out', "").replace(
            '<button type="submit">Filter', ""
        )
        assert '<button type="submit">' not in actions, url
    assert client.post(f"/deployments/{deployment.pk}/scale/", {"replicas": 3}).status_code == 403
    assert client.post("/checkpoints/", {"name": "x", "path": "/x"}).status_code == 403


def test_operator_sees_actions_and_errors_inline(login, make_deployment):
    deployment = make_deployment(replicas=1)
    client = login("operator")
    page = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert "Scale</button>" in page
    response = client.post(f"/deployments/{deployment.pk}/scale/", {"replicas": -2})
    assert response.status_code == 400
    assert "Ensure this value is greater than or equal to 0." in response.content.decode()
    response = client.post("/checkpoints/", {"name": "c", "revision": "main", "path": "relative"})
    assert "must be an absolute path on the nodes" in response.content.decode()
    response = client.post("/deployments/new/", {"name": "bad name!", "replicas": 1})
    assert response.status_code == 400 and "Enter a valid" in response.content.decode()


def test_deployment_page_says_whether_it_is_batch_invariant(login, make_deployment):
    client = login("viewer")
    plain = make_deployment(replicas=0)
    invariant = make_deployment("exact", replicas=0, engine_options={"batch_invariant": True})
    assert '<span id="batch-invariant"' in client.get(f"/deployments/{plain.pk}/").content.decode()
    assert ">not batch-invariant</span>" in client.get(f"/deployments/{plain.pk}/").content.decode()
    assert ">batch-invariant</span>" in client.get(f"/deployments/{invariant.pk}/").content.decode()
