"""Seeded JSON schemas of varied features, for structured-output tests and ``chassis bench structured``:
nesting, enums, arrays with bounds, string patterns and lengths, numeric bounds, anyOf and $ref.
Values stay short (bounded strings and arrays) so a small model completes them within a few dozen
tokens."""

from __future__ import annotations

import random

_NAMES = ["id", "name", "kind", "size", "tags", "owner", "color", "score", "items", "code", "level", "note"]


def _leaf(rng: random.Random, refs: dict) -> dict:
    pick = rng.randrange(8)
    if pick == 0:
        return {"type": "string", "minLength": 1, "maxLength": rng.randint(3, 12)}
    if pick == 1:
        return {"type": "integer", "minimum": rng.randint(-5, 5), "maximum": rng.randint(10, 999)}
    if pick == 2:
        return {
            "enum": rng.sample(["red", "green", "blue", "cyan", "grey", 1, 2, True, None], rng.randint(2, 4))
        }
    if pick == 3:
        return {"type": "string", "pattern": rng.choice(["^[a-z]{2,6}$", "^[A-Z][0-9]{2}$", "^(yes|no)$"])}
    if pick == 4:
        return {"type": "boolean"}
    if pick == 5:
        return {
            "anyOf": [{"type": "integer", "minimum": 0, "maximum": 99}, {"type": "string", "maxLength": 5}]
        }
    if pick == 6:
        refs.setdefault("point", _point())
        return {"$ref": "#/$defs/point"}
    return {"type": "number", "minimum": 0, "maximum": 100}


def _point() -> dict:
    return {
        "type": "object",
        "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}, "y": {"type": "integer"}},
        "required": ["x", "y"],
        "additionalProperties": False,
    }


def _value(rng: random.Random, depth: int, refs: dict) -> dict:
    pick = rng.randrange(6) if depth < 2 else 5
    if pick == 0:
        return _object(rng, depth + 1, refs)
    if pick == 1:
        low = rng.randint(0, 2)
        return {
            "type": "array",
            "items": _leaf(rng, refs),
            "minItems": low,
            "maxItems": low + rng.randint(0, 2),
        }
    return _leaf(rng, refs)


def _object(rng: random.Random, depth: int, refs: dict) -> dict:
    names = rng.sample(_NAMES, rng.randint(1, 3 if depth else 4))
    properties = {name: _value(rng, depth, refs) for name in names}
    required = [n for n in names if rng.random() < 0.8] or names[:1]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def json_schemas(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    schemas = []
    for _ in range(count):
        refs: dict = {}
        schema = _object(rng, 0, refs)
        if refs:
            schema["$defs"] = refs
        schemas.append(schema)
    return schemas
