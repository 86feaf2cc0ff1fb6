"""Prefill/decode disaggregation in the control plane: a prefill and a decode deployment of one
served model name are the model's two replica groups, each placed and scaled on its own; the API
shows the groups, refuses settings the roles cannot work with (a 400 naming ``role``), and a
replica launches with its deployment's role and the model's shared KV directory."""

import pytest
from controlplane.serving.execution import shared_kv_dir
from controlplane.serving.launcher import build_command
from controlplane.serving.models import Deployment

from chassis.main import build_parser
from engine.config_cli import config_from_args

pytestmark = pytest.mark.django_db


def _create(api, checkpoint, name, role, **fields):
    body = {"name": name, "served_model_name": "chat", "checkpoint": checkpoint.pk, "role": role, **fields}
    return api("operator").post("/api/v1/deployments/", body, format="json")


def test_prefill_and_decode_deployments_of_one_model_show_as_its_role_groups(api, ready_checkpoint):
    assert _create(api, ready_checkpoint, "chat-prefill", "prefill", replicas=1).status_code == 201
    assert _create(api, ready_checkpoint, "chat-decode", "decode", replicas=3).status_code == 201
    deployments = api("operator").get("/api/v1/deployments/").json()
    rows = deployments["results"] if isinstance(deployments, dict) else deployments
    expected = {
        "prefill": {"deployments": ["chat-prefill"], "replicas": 1},
        "decode": {"deployments": ["chat-decode"], "replicas": 3},
    }
    assert [row["role_groups"] for row in rows] == [expected, expected]
    decode = Deployment.objects.get(name="chat-decode")
    response = api("operator").post(f"/api/v1/deployments/{decode.pk}/scale/", {"replicas": 2}, format="json")
    assert response.status_code in (200, 202), response.json()
    row = api("operator").get(f"/api/v1/deployments/{decode.pk}/").json()
    assert row["role_groups"]["decode"]["replicas"] == 2 and row["role_groups"]["prefill"]["replicas"] == 1


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"engine_options": {"enable_prefix_caching": False}}, "leave prefix caching on"),
        ({"tp_size": 2}, "needs tp_size 1"),
    ],
)
def test_settings_a_role_cannot_work_with_are_a_400_naming_role(api, ready_checkpoint, fields, message):
    response = _create(api, ready_checkpoint, "chat-prefill", "prefill", **fields)
    assert response.status_code == 400
    assert message in response.json()["role"][0]
    assert not Deployment.objects.exists()


def test_kv_role_is_the_deployments_not_an_engine_option(api, ready_checkpoint):
    response = _create(api, ready_checkpoint, "chat", "mixed", engine_options={"kv_role": "prefill"})
    assert response.status_code == 400
    assert response.json() == {
        "engine_options": ["kv_role: set from the deployment's role, not an engine option"]
    }


def _config(**kwargs):
    command = build_command(
        model_dir="/m", host="127.0.0.1", port=8100, vendor="cpu", served_model_name="chat", replica_id="r1",
        **kwargs,
    )  # fmt: skip
    return config_from_args(build_parser().parse_args(command[3:]))  # what the engine will run with


def test_a_replica_launches_with_its_role_and_the_models_shared_kv_directory(
    settings, ready_checkpoint, tmp_path
):
    settings.VAR_DIR = str(tmp_path)
    prefill = Deployment.objects.create(
        name="p", served_model_name="chat", checkpoint=ready_checkpoint, role="prefill"
    )
    decode = Deployment.objects.create(
        name="d", served_model_name="chat", checkpoint=ready_checkpoint, role="decode"
    )
    assert shared_kv_dir(prefill) == shared_kv_dir(decode) == tmp_path / "kv-shared" / "chat"
    config = _config(options={}, role="prefill", shared_kv_dir=str(shared_kv_dir(prefill)))
    assert (config.kv_role, config.kv_shared_cache_dir) == ("prefill", str(tmp_path / "kv-shared" / "chat"))
    own = _config(options={"kv_shared_cache_dir": "/fast/kv"}, role="decode", shared_kv_dir="/var/kv")
    assert (own.kv_role, own.kv_shared_cache_dir) == ("decode", "/fast/kv")  # the options' directory wins
    assert _config(options={}).kv_role == "mixed"
    with pytest.raises(ValueError, match="a decode replica needs a shared KV directory"):
        _config(options={}, role="decode")


def test_the_deployment_page_shows_the_models_replica_groups(login, make_deployment):
    from controlplane.serving.models import Replica

    prefill = make_deployment("chat-prefill", served_model_name="chat", role="prefill")
    decode = make_deployment("chat-decode", served_model_name="chat", role="decode", replicas=2)
    make_deployment("other")
    Replica.create_for(decode, "t", "t")
    client = login("viewer")
    page = client.get(f"/deployments/{prefill.pk}/").content.decode()
    section = page[page.index('id="role-groups"') : page.index("</section>", page.index('id="role-groups"'))]
    assert f'href="/deployments/{decode.pk}/">chat-decode</a></td><td>2</td><td>0</td>' in section
    assert f'href="/deployments/{prefill.pk}/">chat-prefill</a></td><td>1</td>' in section
    assert "other" not in section
    mixed = client.get(f"/deployments/{Deployment.objects.get(name='other').pk}/").content.decode()
    assert 'id="role-groups"' not in mixed  # a plain model has no groups to show
