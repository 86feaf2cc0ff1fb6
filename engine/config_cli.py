"""``chassis serve``'s engine flags, generated from ``EngineConfig``'s fields, and the way back.

A field ``max_num_seqs`` is the flag ``--max-num-seqs``; a bool field ``warm_up`` is the pair
``--warm-up/--no-warm-up``; ``model_dir`` is the positional MODEL_DIR. The extra spellings a field
declares (``--tp``, ``--no-prefix-caching``) keep older command lines working. The control plane
checks a deployment's engine options with the same parser (``option_errors``), so an option the
engine would refuse is refused before anything launches. No torch here.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Collection, Mapping
from typing import Any

from engine import env
from engine.config import EngineConfig


class OptionError(ValueError):
    """An argument the generated parser refuses (instead of argparse's print-and-exit)."""


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        raise OptionError(message)


def flag_for(name: str) -> str:
    return "--" + name.replace("_", "-")


def engine_fields() -> list[dataclasses.Field]:
    return list(dataclasses.fields(EngineConfig))


def add_engine_arguments(
    parser: argparse.ArgumentParser,
    *,
    model_dir: bool = True,
    defaults: bool = True,
    only: Collection[str] | None = None,
    default_overrides: Mapping[str, Any] | None = None,
) -> None:
    """One argument per ``EngineConfig`` field. ``model_dir=False`` leaves the positional out;
    ``defaults=False`` leaves unset flags out of the parsed namespace (only what was given).
    A tool that sets a few engine fields (a benchmark) takes ``only`` those, with its own defaults."""
    overrides = dict(default_overrides or {})
    unknown = (set(only or ()) | set(overrides)) - {f.name for f in engine_fields()}
    if unknown:
        raise ValueError(f"not EngineConfig fields: {', '.join(sorted(unknown))}")
    for f in engine_fields():
        meta = f.metadata
        if only is not None and f.name not in only:
            continue
        if meta.get("positional"):
            if model_dir:
                parser.add_argument(f.name, metavar=f.name.upper(), help=meta["help"])
            continue
        default = overrides.get(f.name, f.default) if defaults else argparse.SUPPRESS
        kind = _value_type(f)
        help_text = _help(f, kind)
        names = [*meta["aliases"], flag_for(f.name)]
        if kind is bool:
            parser.add_argument(
                *names, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
            for negative in meta["negative_aliases"]:
                parser.add_argument(
                    negative, dest=f.name, action="store_false", default=default, help=argparse.SUPPRESS
                )
        else:
            parser.add_argument(
                *names, dest=f.name, type=kind, choices=meta["choices"], default=default, help=help_text
            )


def config_from_args(args: argparse.Namespace, **overrides: Any) -> EngineConfig:
    """The EngineConfig of a parsed command line (raises ValueError for a value it refuses)."""
    given = {f.name: getattr(args, f.name) for f in engine_fields() if hasattr(args, f.name)}
    return EngineConfig(**{**given, **overrides})


def option_flags(options: Mapping[str, Any]) -> list[str]:
    """``{"max_num_seqs": 8, "enable_prefix_caching": False}`` -> ``["--max-num-seqs", "8",
    "--no-enable-prefix-caching"]``. None means the default: no flag. A name that is no field (a
    server flag such as ``tool_parser``) gets the same rule, except that False gives no flag."""
    flags: list[str] = []
    bool_flags = _bool_flags()
    for key, value in options.items():
        flag = flag_for(str(key))
        if value is None:
            continue
        if flag in bool_flags and isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag.removeprefix("--"))
        elif value is True:
            flags.append(flag)
        elif value is not False:
            flags += [flag, str(value)]
    return flags


def field_of(key: str) -> str | None:
    """The field an option name sets: ``"tp"`` -> ``tensor_parallel_size``; None if it sets none."""
    return _flag_fields().get(flag_for(str(key)))


def option_errors(options: Mapping[str, Any]) -> dict[str, str]:
    """Option name -> why ``chassis serve`` would refuse it, for each refused option of ``options``
    (JSON-style values: a bool field takes true/false, the others a string or number)."""
    errors: dict[str, str] = {}
    parser = _RaisingParser(prog="chassis serve", add_help=False)
    add_engine_arguments(parser, model_dir=False, defaults=False)
    for key, value in options.items():
        name = field_of(key)
        if name is None:
            errors[key] = "not an engine option of `chassis serve`"
            continue
        field_type = _value_type(EngineConfig.__dataclass_fields__[name])
        if not isinstance(value, (str, int, float, type(None))):
            errors[key] = "must be a string, number or boolean"
            continue
        if value is not None and (field_type is bool) != isinstance(value, bool):
            errors[key] = "must be true or false" if field_type is bool else "must be a value, not true/false"
            continue
        try:
            parsed = vars(parser.parse_args(option_flags({key: value})))
            EngineConfig(model_dir=".", **parsed)
        except ValueError as exc:  # OptionError included
            errors[key] = str(exc)
    return errors


def _value_type(f: dataclasses.Field) -> type:
    """int, float, str or bool: the field's annotation without ``| None`` (``str | Path`` is str)."""
    hint = typing.get_type_hints(EngineConfig)[f.name]
    if isinstance(hint, types.UnionType):
        kinds = [k for k in typing.get_args(hint) if k is not type(None)]
        return kinds[0]
    return hint


def _help(f: dataclasses.Field, kind: type) -> str:
    text = f.metadata["help"]
    variable = env.variable_for(f.name)
    if variable:
        return text + f" (default: ${variable} if set{', else auto' if f.metadata['choices'] else ''})"
    if kind is bool and f.default is not None:
        return text + f" (default: {'on' if f.default else 'off'})"
    if f.default is not None:
        return text + " (default: %(default)s)"
    return text


def _flag_fields() -> dict[str, str]:
    """Every flag spelling (``--no-`` forms too) -> the field it sets."""
    spellings = {}
    for f in engine_fields():
        if f.metadata.get("positional"):
            continue
        names = [flag_for(f.name), *f.metadata["aliases"]]
        if _value_type(f) is bool:
            names += ["--no-" + n.removeprefix("--") for n in names] + list(f.metadata["negative_aliases"])
        spellings.update(dict.fromkeys(names, f.name))
    return spellings


def _bool_flags() -> set[str]:
    return {
        flag_for(f.name)
        for f in engine_fields()
        if not f.metadata.get("positional") and _value_type(f) is bool
    }
