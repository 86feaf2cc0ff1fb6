"""A deployment's engine options are checked with ``chassis serve``'s own parser (generated from
EngineConfig) when the deployment is written, so a bad one is a 400 naming it, not a failed launch."""

import pytest
from controlplane.serving.models import Deployment

pytestmark = pytest.mark.django_db


def _create(api, checkpoint, engine_options, role="operator"):
    return api(role).post(
        "/api/v1/deployments/",
        {"name": "chat", "checkpoint": checkpoint.pk, "engine_options": engine_options},
        format="json",
    )


def test_unknown_option_is_a_400_naming_it(api, ready_checkpoint):
    response = _create(api, ready_checkpoint, {"no_such_flag": 1})
    assert response.status_code == 400
    assert response.json() == {"engine_options": ["no_such_flag: not an engine option of `chassis serve`"]}
    assert not Deployment.objects.exists()


def test_ill_typed_option_is_a_400_naming_it(api, ready_checkpoint):
    response = _create(api, ready_checkpoint, {"max_num_seqs": "many"})
    assert response.status_code == 400
    assert response.json() == {
        "engine_options": ["max_num_seqs: argument --max-num-seqs: invalid int value: 'many'"]
    }
    response = _create(api, ready_checkpoint, {"max_num_seqs": 0, "enable_prefix_caching": "no"})
    assert response.status_code == 400
    messages = response.json()["engine_options"]
    assert messages == [
        "max_num_seqs: max_num_seqs must be a positive integer, got 0",
        "enable_prefix_caching: must be true or false",
    ]


def test_what_the_deployment_sets_itself_is_refused_as_an_option(api, ready_checkpoint):
    response = _create(api, ready_checkpoint, {"tp": 2, "device": "cuda", "model_dir": "/m"})
    assert response.status_code == 400
    assert sorted(response.json()["engine_options"]) == [
        "device: set from the deployment's vendor, not an engine option",
        "model_dir: set from the deployment's checkpoint, not an engine option",
        "tp: set from the deployment's tp_size, not an engine option",
    ]


def test_good_options_are_kept_and_launch_as_given(api, ready_checkpoint):
    from controlplane.serving.launcher import build_command

    options = {"max_num_seqs": 8, "enable_prefix_caching": False, "dtype": "float16", "kernels": "torch"}
    response = _create(api, ready_checkpoint, options)
    assert response.status_code == 201, response.json()
    deployment = Deployment.objects.get()
    assert deployment.engine_options == options
    command = build_command(
        model_dir="/m", host="127.0.0.1", port=8100, vendor=deployment.vendor, served_model_name="chat",
        replica_id="r1", options=deployment.engine_options, tp_size=deployment.tp_size,
    )  # fmt: skip
    from chassis.main import build_parser
    from engine.config_cli import config_from_args

    config = config_from_args(build_parser().parse_args(command[3:]))  # what the engine will run with
    assert (config.max_num_seqs, config.enable_prefix_caching, config.dtype) == (8, False, "float16")
    assert (config.kernels, config.device, config.tensor_parallel_size) == ("torch", "cpu", 1)
