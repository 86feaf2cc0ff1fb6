"""The seeded JSON-schema generator lives in ``engine.testing.json_schemas`` (the structured-output
benchmark uses it too); tests import it from here."""

from engine.testing.json_schemas import json_schemas

__all__ = ["json_schemas"]
