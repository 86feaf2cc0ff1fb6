"""What validation finds a checkpoint costs (parameters in total and per token, weight and KV memory,
memory per device at each tensor-parallel size), in the admin API and on the checkpoint pages."""

import json

import pytest
from controlplane.checkpoints.models import Checkpoint
from controlplane.checkpoints.tasks import validate_checkpoint
from controlplane.web.templatetags.units import count
from django.template.defaultfilters import filesizeformat

pytestmark = pytest.mark.django_db


def validated(name: str, model_dir) -> Checkpoint:
    checkpoint = Checkpoint.objects.create(name=name, path=str(model_dir))
    assert validate_checkpoint(checkpoint.pk) == "ready"
    checkpoint.refresh_from_db()
    return checkpoint


def test_dense_checkpoint_facts_in_the_api(api, tiny_model_dir):
    checkpoint = validated("tiny", tiny_model_dir)
    config = json.loads((tiny_model_dir / "config.json").read_text())
    body = api("viewer").get(f"/api/v1/checkpoints/{checkpoint.pk}/").json()
    assert body["parameter_count"] == body["details"]["num_parameters"]  # the tensors the files hold
    assert body["active_parameter_count"] == body["parameter_count"]  # dense, LM head tied to the table
    assert body["weight_bytes"] == 4 * body["parameter_count"]  # float32
    assert body["kv_tokens_per_gib"] == 2**30 // body["kv_bytes_per_token"]
    by_tp = body["memory_per_device_bytes_by_tp"]
    assert by_tp["1"] == body["memory_per_replica_bytes"]
    assert config["num_key_value_heads"] == 2  # one KV head per rank at tp 2, a replica of one at tp 4
    one_head = body["kv_bytes_per_token"] // 2 * body["max_context"]
    assert by_tp["2"] == -(-body["weight_bytes"] // 2) + one_head
    assert by_tp["4"] == -(-body["weight_bytes"] // 4) + one_head
    response = api("operator").patch(
        f"/api/v1/checkpoints/{checkpoint.pk}/", {"active_parameter_count": 1}, format="json"
    )
    assert response.status_code == 200  # read-only: ignored
    assert response.json()["active_parameter_count"] == body["active_parameter_count"]


def test_moe_checkpoint_counts_only_the_routed_top_k_as_active(api, login, tiny_models):
    model_dir = tiny_models["qwen3_moe"]
    checkpoint = validated("tiny-moe", model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    moe_layers = config["num_hidden_layers"] - len(config["mlp_only_layers"])
    idle_experts = config["num_local_experts"] - config["num_experts_per_tok"]  # as transformers 5 writes it
    expert = 3 * config["hidden_size"] * config["moe_intermediate_size"]
    input_table = 0 if config["tie_word_embeddings"] else config["vocab_size"] * config["hidden_size"]
    body = api("viewer").get(f"/api/v1/checkpoints/{checkpoint.pk}/").json()
    assert body["parameter_count"] == body["details"]["num_parameters"]
    assert body["parameter_count"] - body["active_parameter_count"] == (
        moe_layers * idle_experts * expert + input_table
    )
    page = login("viewer").get("/checkpoints/rows/").content.decode()
    assert f"{count(checkpoint.parameter_count)} ({count(checkpoint.active_parameter_count)} active)" in page


def test_checkpoint_page_shows_the_facts_and_each_deployments_memory(login, tiny_model_dir):
    from controlplane.serving.models import Deployment

    checkpoint = validated("tiny", tiny_model_dir)
    Deployment.objects.create(name="wide", checkpoint=checkpoint, tp_size=2)
    Deployment.objects.create(name="odd", checkpoint=checkpoint, tp_size=3)  # no facts recorded for 3
    client = login("viewer")
    assert f'href="/checkpoints/{checkpoint.pk}/"' in client.get("/checkpoints/rows/").content.decode()
    page = client.get(f"/checkpoints/{checkpoint.pk}/").content.decode()
    assert f'<td id="total-parameters">{count(checkpoint.parameter_count)}</td>' in page
    assert f'<td id="active-parameters">{count(checkpoint.active_parameter_count)}</td>' in page
    assert f'<td id="kv-tokens-per-gib">{2**30 // checkpoint.kv_bytes_per_token}</td>' in page
    for figure in ("weight-memory", "kv-per-token", "memory-per-replica"):
        assert f'<td id="{figure}"></td>' not in page, figure
    wide, odd = (page.split(f">{name}</a>")[1].split("</tr>")[0] for name in ("wide", "odd"))
    assert f"<td>{filesizeformat(checkpoint.memory_per_device_bytes(2))}</td>" in wide
    assert odd.endswith("<td></td>")


def test_a_row_validated_before_the_facts_existed_still_renders(api, login, ready_checkpoint):
    client = login("viewer")
    assert client.get("/checkpoints/").status_code == 200
    page = client.get(f"/checkpoints/{ready_checkpoint.pk}/").content.decode()
    assert '<td id="active-parameters"></td>' in page and 'id="memory-by-tp"' not in page
    body = api("viewer").get(f"/api/v1/checkpoints/{ready_checkpoint.pk}/").json()
    assert body["active_parameter_count"] is None and body["kv_tokens_per_gib"] is None
    assert body["memory_per_device_bytes_by_tp"] == {}
