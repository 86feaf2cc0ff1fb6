"""The deployment form in the operator UI refuses engine options ``chassis serve`` would refuse."""

import json

import pytest
from controlplane.api.roles import set_role
from controlplane.serving.models import Deployment
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client):
    user = get_user_model().objects.create_user("operator-form", password="pw-for-tests-123")
    set_role(user, "operator")
    client.force_login(user)
    return client


def _post(client, checkpoint, engine_options):
    return client.post(
        "/deployments/new/",
        {
            "name": "chat",
            "checkpoint": checkpoint.pk,
            "replicas": 1,
            "tp_size": 1,
            "vendor": "cpu",
            "role": "mixed",
            "routing_policy": "cache-aware",
            "engine_options": json.dumps(engine_options),
        },
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"no_such_flag": 1}, "no_such_flag: not an engine option of `chassis serve`"),
        (
            {"max_num_seqs": "many"},
            "max_num_seqs: argument --max-num-seqs: invalid int value: &#x27;many&#x27;",
        ),
    ],
)
def test_bad_engine_option_is_a_form_error(operator, ready_checkpoint, options, message):
    response = _post(operator, ready_checkpoint, options)
    assert response.status_code == 400
    form = response.context["form"]
    assert list(form.errors) == ["engine_options"]
    assert message in response.content.decode()
    assert not Deployment.objects.exists()


def test_good_engine_options_create_the_deployment(operator, ready_checkpoint):
    response = _post(operator, ready_checkpoint, {"max_num_seqs": 8, "no_prefix_caching": True})
    assert response.status_code == 302
    assert Deployment.objects.get().engine_options == {"max_num_seqs": 8, "no_prefix_caching": True}
