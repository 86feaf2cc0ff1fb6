"""Expert parallelism with data-parallel attention in the control plane (issue 23): a deployment asks
for ep_size and dp_size; the API and the forms refuse what EngineConfig would refuse (a 400 naming the
field), placement gives a replica tp_size × ep_size accelerators on one node, the launch passes
``--ep``/``--dp`` and makes every one of them visible, and revisions keep the sizes."""

import pytest
from controlplane.serving import execution, launcher
from controlplane.serving.choices import ReplicaState as S
from controlplane.serving.models import Deployment
from controlplane.serving.reconciler import reconcile_deployment

pytestmark = pytest.mark.django_db


def _create(api, checkpoint, **fields):
    body = {"name": "moe", "checkpoint": checkpoint.pk, "vendor": "nvidia", **fields}
    return api("operator").post("/api/v1/deployments/", body, format="json")


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"ep_size": 2}, "ep_size", "ep_size (2) must equal dp_size (1)"),
        ({"dp_size": 4}, "ep_size", "ep_size (1) must equal dp_size (4)"),
        ({"ep_size": 2, "dp_size": 2, "tp_size": 2}, "ep_size", "ep_size > 1 works with tp_size 1 only"),
        (
            {"ep_size": 2, "dp_size": 2, "engine_options": {"speculative_method": "ngram"}},
            "ep_size",
            "ep_size > 1 works without speculative decoding",
        ),
        (
            {"ep_size": 2, "dp_size": 2, "role": "prefill"},
            "ep_size",
            "work with ep_size 1 only (for now); a prefill replica moves its KV through the KV tiers",
        ),
        ({"ep_size": 0, "dp_size": 0}, "ep_size", "greater than or equal to 1"),
    ],
)
def test_sizes_the_engine_refuses_are_a_400_naming_the_field(api, ready_checkpoint, fields, field, message):
    response = _create(api, ready_checkpoint, **fields)
    assert response.status_code == 400, response.json()
    assert message in response.json()[field][0]
    assert not Deployment.objects.exists()


def test_the_sizes_are_the_deployments_not_engine_options(api, ready_checkpoint):
    response = _create(api, ready_checkpoint, engine_options={"ep": 2, "data_parallel_size": 2})
    assert response.status_code == 400
    assert sorted(response.json()["engine_options"]) == [
        "data_parallel_size: set from the deployment's dp_size, not an engine option",
        "ep: set from the deployment's ep_size, not an engine option",
    ]


def test_an_expert_parallel_deployment_is_created_and_a_patch_is_checked_against_it(api, ready_checkpoint):
    created = _create(api, ready_checkpoint, ep_size=2, dp_size=2)
    assert created.status_code == 201, created.json()
    body = created.json()
    assert (body["tp_size"], body["ep_size"], body["dp_size"], body["world_size"]) == (1, 2, 2, 2)
    url = f"/api/v1/deployments/{body['id']}/"
    patch = api("operator").patch(url, {"tp_size": 2}, format="json")  # ep_size 2 stays
    assert patch.status_code == 400 and "works with tp_size 1 only" in patch.json()["ep_size"][0]
    assert api("operator").patch(url, {"ep_size": 4, "dp_size": 4}, format="json").status_code == 200
    assert Deployment.objects.get().world_size == 4


def test_the_forms_refuse_what_the_engine_refuses_as_field_errors(login, ready_checkpoint, make_deployment):
    client = login("operator")
    form = {"name": "moe", "checkpoint": ready_checkpoint.pk, "replicas": 1, "tp_size": 1, "vendor": "nvidia",
            "role": "mixed", "routing_policy": "cache-aware", "engine_options": "{}"}  # fmt: skip
    refused = client.post("/deployments/new/", {**form, "ep_size": 2, "dp_size": 1})
    assert refused.status_code == 400
    assert list(refused.context["form"].errors) == ["ep_size"]
    assert "ep_size (2) must equal dp_size (1)" in refused.content.decode()
    assert client.post("/deployments/new/", {**form, "ep_size": 2, "dp_size": 2}).status_code == 302
    assert Deployment.objects.get(name="moe").spec()[2:] == (1, 2, 2)

    dense = make_deployment("dense")
    dense.record_revision("test")
    revise = {"checkpoint": ready_checkpoint.pk, "tp_size": 2, "engine_options": "{}"}
    refused = client.post(f"/deployments/{dense.pk}/revise/", {**revise, "ep_size": 2, "dp_size": 2})
    assert refused.status_code == 400
    assert list(refused.context["revision_form"].errors) == ["ep_size"]
    assert client.post(f"/deployments/{dense.pk}/revise/", revise).status_code == 302  # sizes left out: kept
    dense.refresh_from_db()
    assert (dense.revision.number, dense.spec()[2:]) == (2, (2, 1, 1))


def test_placement_gives_a_replica_its_world_size_on_one_node(make_node, make_deployment):
    make_node("n1", count=2)
    deployment = make_deployment(replicas=2, ep_size=2, dp_size=2, vendor="nvidia")
    reason = reconcile_deployment(deployment.pk, "test")
    assert reason == "needs 2 nvidia in one domain; largest free block is 0"
    placed = deployment.replica_set.get(state=S.SCHEDULED)
    assert sorted(placed.accelerators.values_list("index", flat=True)) == [0, 1]
    deployment.refresh_from_db()
    assert (deployment.placement_status, deployment.placement_reason) == ("unschedulable", reason)


def test_a_domain_of_nodes_that_fit_only_together_is_unschedulable_saying_why(make_node, make_deployment):
    make_node("rack-a", count=1, domain="rack")
    make_node("rack-b", count=1, domain="rack")
    deployment = make_deployment(replicas=1, ep_size=2, dp_size=2, vendor="nvidia")
    reconcile_deployment(deployment.pk, "test")
    deployment.refresh_from_db()
    assert deployment.placement_reason == (
        "needs 2 nvidia in one domain; largest free block is 1; domain default/rack has 2 free across 2 "
        "nodes, but a replica's ranks run on one node"
    )
    assert deployment.replica_set.get().state == S.PENDING


def test_the_launch_passes_the_sizes_and_makes_every_accelerator_visible(
    make_node, make_deployment, settings, tmp_path, monkeypatch
):
    settings.VAR_DIR = str(tmp_path)
    make_node("n1", count=4)
    deployment = make_deployment(replicas=1, ep_size=4, dp_size=4, vendor="nvidia")
    deployment.record_revision("test")
    reconcile_deployment(deployment.pk, "test")
    replica = deployment.replica_set.get()
    started = {}

    def start_engine(command, env, log_path):
        started.update(command=command, env=env)
        return 2**22 + 1  # no such process: the launch then fails, which is not what this test is about

    monkeypatch.setattr(launcher, "start_engine", start_engine)
    execution.launch(replica.pk)
    assert "--tp 1 --ep 4 --dp 4" in " ".join(started["command"])
    assert started["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"


def test_revisions_keep_the_sizes_and_rollback_restores_them(api, ready_checkpoint):
    created = _create(api, ready_checkpoint, ep_size=2, dp_size=2).json()
    url = f"/api/v1/deployments/{created['id']}/"
    assert api("operator").patch(url, {"ep_size": 1, "dp_size": 1}, format="json").json()["revision"] == 2
    revisions = api("viewer").get(f"{url}revisions/").json()
    assert [(r["number"], r["tp_size"], r["ep_size"], r["dp_size"]) for r in revisions] == [
        (2, 1, 1, 1),
        (1, 1, 2, 2),
    ]
    back = api("operator").post(f"{url}rollback/", {}, format="json")
    assert back.status_code == 202, back.json()
    assert (back.json()["revision"], back.json()["ep_size"], back.json()["dp_size"]) == (1, 2, 2)


def test_the_pages_show_the_sizes(login, make_deployment):
    deployment = make_deployment(ep_size=2, dp_size=2, vendor="nvidia")
    deployment.record_revision("test")
    client = login("viewer")
    assert "nvidia × ep 2 · dp 2" in client.get("/deployments/").content.decode()
    page = client.get(f"/deployments/{deployment.pk}/").content.decode()
    assert 'title="accelerators per replica: 2 (tp × ep), on one node">nvidia × ep 2 · dp 2</span>' in page
    assert "<td>ep 2 · dp 2</td>" in page  # the revisions table
    checkpoint_page = client.get(f"/checkpoints/{deployment.checkpoint_id}/").content.decode()
    assert "nvidia × ep 2 · dp 2" in checkpoint_page and "not estimated for ep &gt; 1" in checkpoint_page
