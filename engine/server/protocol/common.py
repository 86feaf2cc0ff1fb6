"""Pieces shared by the request models of all three APIs."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

# The int64 range, as vLLM takes it; torch.Generator.manual_seed overflows past 2**64.
Seed = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class Strict(BaseModel):
    """Unknown fields are refused (400 naming them), never silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Loose(BaseModel):
    """For nested objects whose extra fields carry no meaning for generation (e.g. cache_control)."""

    model_config = ConfigDict(extra="allow")


class EveryApiExtras(Strict):
    """Fields every API takes: vLLM's structured-output extras (engine/server/api/structured.py) and
    the sampling seed, under vLLM's name ``seed`` or DeepSeek's ``seq_seed`` (one of the two)."""

    seed: Seed | None = None
    seq_seed: Seed | None = None

    structured_outputs: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_grammar: str | None = None
    guided_choice: list[str] | None = None


class FunctionDef(Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
