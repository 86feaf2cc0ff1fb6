"""``chassis serve`` takes a GGUF checkpoint: the real SmolLM2 answers over the OpenAI API."""

import httpx

from engine.testing.smollm2 import smollm2_path
from tests.support.replicas import API_KEY, MODEL, start_replica, stop_replica


def test_chassis_serve_answers_from_the_smollm2_gguf(tmp_path):
    replica = start_replica(smollm2_path(), tmp_path)
    try:
        response = httpx.post(
            f"{replica.base_url}/v1/chat/completions",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={
                "model": MODEL,
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
                "temperature": 0,
                "max_tokens": 24,
            },
            timeout=120,
        )
        assert response.status_code == 200, response.text
        assert "Paris" in response.json()["choices"][0]["message"]["content"]
    finally:
        stop_replica(replica)
