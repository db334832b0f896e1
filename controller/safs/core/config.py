"""One config style: frozen pydantic models that refuse unknown keys, and one error translation.

Every SAFS settings class (``AllocatorConfig``, ``SchedulerConfig``, the transports' configs,
``SimConfig``, the scenario file) is a :class:`ConfigModel`:

* **Frozen** value objects built with keyword arguments; :meth:`ConfigModel.replace` is the
  validating copy (what ``dataclasses.replace`` was).
* **Unknown keys are refused**, and types are **strict**: a YAML string is not taken as a
  number, nor ``true`` as an integer (an integer is accepted where a number is). Ranges are
  pydantic constraints on the fields (``Field(ge=1, le=65535)``); checks that involve two
  fields are model validators that raise :class:`FieldError`.
* **One translation** of :class:`pydantic.ValidationError` into
  :class:`safs.core.errors.InvalidInput` (:func:`invalid_input`): the field is the dotted key
  path under the caller's prefix (``"sim.dctcp.g"``, ``"scheduler.allocator.headroom"``,
  ``"config.lease_ns"``) and the message says what is allowed, written from the field's type
  and constraints, with the unit its name ends in::

      must be an integer in 576..65535 bytes, got 100
      must be an integer >= 1 ns, got 0
      must be a number in [0, 1), got 1.0
      must be true or false, got 1
      unknown key; valid: a, b, c

  Unit suffixes: ``_ns`` ns, ``_us`` µs, ``_ms`` ms, ``_s`` s, ``_bps`` bit/s, ``_bytes``
  bytes, ``_pkts`` packets.

Mappings from files (YAML) go through :meth:`ConfigModel.from_mapping`, which also accepts a
list where a field is a tuple (YAML has no tuples); keyword construction wants the tuple.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, BeforeValidator, ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from safs.core.errors import InvalidInput

Model = TypeVar("Model", bound="ConfigModel")

_UNITS = (("_ns", "ns"), ("_us", "µs"), ("_ms", "ms"), ("_bps", "bit/s"), ("_bytes", "bytes"),
          ("_pkts", "packets"), ("_s", "s"))


def _list_as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


#: ``Annotated[tuple[...], LIST_AS_TUPLE]``: a field that also takes a list in keyword
#: construction (:meth:`ConfigModel.from_mapping` takes one for every tuple field).
LIST_AS_TUPLE = BeforeValidator(_list_as_tuple)


class FieldError(ValueError):
    """Raised by a model validator for a check across fields; names the field to blame.

    Args:
        field: the field's name in the model that raises it (the prefix and key path are added
            by :func:`invalid_input`).
        message: what is allowed and what was given (e.g. ``"must be >= rto_ns (10), got 5"``).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class ConfigModel(BaseModel):
    """Base of every SAFS config: frozen, unknown keys forbidden, strict types.

    Keyword construction validates and raises :class:`InvalidInput` whose field is
    ``FIELD_PREFIX + <key path>`` (e.g. ``"config.headroom"``); :meth:`from_mapping` takes the
    prefix from the caller.

    Raises:
        InvalidInput: on construction, a value of the wrong type or out of range, or an unknown key.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    #: Prefix of the field names in errors raised by keyword construction and :meth:`replace`.
    FIELD_PREFIX: ClassVar[str] = ""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise invalid_input(exc, type(self), self.FIELD_PREFIX) from None

    # Only keyword construction translates errors: with this marker (pydantic's own, on
    # BaseModel.__init__) validation (model_validate, a nested model) does not call __init__,
    # so a nested config's error keeps its key path and reaches the outer translation.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]  # pydantic's marker, set on the function

    @classmethod
    def from_mapping(cls: type[Model], mapping: Any, *, source: str | None = None, prefix: str | None = None,
                     fixed: Mapping[str, Any] | None = None) -> Model:
        """Build from a mapping of user keys (a YAML section), lists accepted for tuple fields.

        Args:
            mapping: the user's keys (None: none).
            source: file the mapping came from, for the error.
            prefix: prefix of error field names (default ``FIELD_PREFIX``), e.g. ``"sim.dctcp."``.
            fixed: keys the caller sets (e.g. ``mtu_bytes`` from the enclosing config); the user
                may not set them, and they are not listed as valid keys.

        Raises:
            InvalidInput: ``mapping`` not a mapping, an unknown key (the message lists the valid
                ones) or a bad value; field ``prefix + key path``, source ``source``.
        """
        prefix = cls.FIELD_PREFIX if prefix is None else prefix
        fixed = dict(fixed or {})
        raw = cls._user_keys(mapping, prefix, source, fixed)
        try:
            return cls.model_validate({**_lists_to_tuples(cls, raw), **fixed})
        except ValidationError as exc:
            raise invalid_input(exc, cls, prefix, source, exclude=fixed) from None

    @classmethod
    def check_overrides(cls, mapping: Any, *, source: str | None = None, prefix: str | None = None,
                        fixed: Iterable[str] = ()) -> None:
        """Check a partial mapping (overrides of derived values): each key must be a field
        (not one of ``fixed``) and each value of its field's type and range. Checks across
        fields are left to construction.

        Raises:
            InvalidInput: as :meth:`from_mapping`.
        """
        prefix = cls.FIELD_PREFIX if prefix is None else prefix
        fixed = set(fixed)
        raw = cls._user_keys(mapping, prefix, source, fixed)
        for key, value in _lists_to_tuples(cls, raw).items():
            if key not in cls.model_fields:
                raise InvalidInput(_path(prefix, (str(key),)), _unknown(cls, fixed), source)
            try:
                _field_adapter(cls, key).validate_python(value)
            except ValidationError as exc:
                raise invalid_input(exc, cls, prefix, source, exclude=fixed, loc=(key,)) from None

    def replace(self: Model, **changes: Any) -> Model:
        """A copy with ``changes`` applied, validated like a new instance.

        Raises:
            InvalidInput: as construction (field ``FIELD_PREFIX + key``).
        """
        return type(self)(**{**{name: getattr(self, name) for name in type(self).model_fields}, **changes})

    @classmethod
    def _user_keys(cls, mapping: Any, prefix: str, source: str | None, fixed: Iterable[str]) -> dict[str, Any]:
        if mapping is None:
            return {}
        if not isinstance(mapping, Mapping):
            raise InvalidInput(_path(prefix, ()), f"must be a mapping of {cls.__name__} fields "
                               f"({', '.join(_valid_keys(cls, fixed))}), got {mapping!r}", source)
        for key in mapping:
            if key in fixed:
                raise InvalidInput(_path(prefix, (str(key),)), _unknown(cls, fixed), source)
        return dict(mapping)


def invalid_input(exc: ValidationError, model: type[BaseModel], prefix: str = "", source: str | None = None,
                  exclude: Iterable[str] = (), loc: tuple[str | int, ...] = ()) -> InvalidInput:
    """The :class:`InvalidInput` for the first error of a validation of ``model``.

    Args:
        exc: the pydantic error.
        model: the model validated (its fields give the allowed types, ranges and keys).
        prefix: prepended to the dotted key path (``"sim."``; ``""`` for a whole file).
        source: the file, if any.
        exclude: keys of ``model`` the user may not set (not listed as valid keys).
        loc: key path prepended to the error's own location (a single field validated alone).

    Returns the error (field: ``prefix`` + the key path, ``[i]`` after a list of models, other
    list indices left out; message: what is
    allowed and what was given). An :class:`InvalidInput` raised inside a validator (a nested
    config built by a validator) is returned as it is, with ``source`` added; a
    :class:`FieldError` names a field of the model that raised it; another ``ValueError``'s
    message is used as it is.
    """
    err = exc.errors(include_url=False)[0]
    where = (*loc, *err["loc"])
    names, owner, info, index = _walk(model, where)
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, InvalidInput):
        return InvalidInput(cause.field, cause.message, cause.source or source)
    if isinstance(cause, FieldError):
        return InvalidInput(_path(prefix, (*names, cause.field)), cause.message, source)
    if err["type"] == "extra_forbidden":
        valid = _unknown(owner, exclude if owner is model else ())
        return InvalidInput(_path(prefix, names), valid, source)
    if isinstance(cause, (ValueError, AssertionError)):
        return InvalidInput(_path(prefix, names), str(cause), source)
    allowed = describe(info, names[-1] if names else "") if info is not None else "valid"
    if err["type"] == "missing":
        what = f"got {index} items" if index is not None else "required key missing"  # a short tuple
        return InvalidInput(_path(prefix, names), f"{what}; must be {allowed}", source)
    at = f" (item {index})" if index is not None else ""
    return InvalidInput(_path(prefix, names), f"must be {allowed}, got {err['input']!r}{at}", source)


def describe(info: FieldInfo, name: str = "") -> str:
    """What a field allows, from its type and constraints (``"an integer in 1..7 or null"``);
    ``name`` gives the unit (``rto_ns`` -> ``ns``)."""
    unit = next((u for suffix, u in _UNITS if name.endswith(suffix)), "")
    return _phrase(info.annotation, list(info.metadata), unit, plural=False)


# ---------------------------------------------------------------------------- internals

def _path(prefix: str, names: Iterable[str]) -> str:
    return (prefix + ".".join(names)) if names else (prefix.rstrip(".") or "<top level>")


def _valid_keys(model: type[BaseModel], exclude: Iterable[str]) -> list[str]:
    exclude = set(exclude)
    return sorted(name for name in model.model_fields if name not in exclude)


def _unknown(model: type[BaseModel], exclude: Iterable[str]) -> str:
    return f"unknown key; valid: {', '.join(_valid_keys(model, exclude))}"


def _walk(model: type[BaseModel], loc: tuple[str | int, ...]
          ) -> tuple[list[str], type[BaseModel], FieldInfo | None, int | None]:
    """Key names along ``loc`` (an index into a list of models kept as ``name[i]``, other
    indices dropped), the model owning the last key, the last key's field and the first index
    into it."""
    names: list[str] = []
    current: type[BaseModel] | None
    owner, current, info, index = model, model, None, None
    keyed = False  # the last field is a dict of models: the next part is one of its keys
    for part in loc:
        if keyed:
            names.append(str(part))
            keyed = False
            continue
        if isinstance(part, int):
            if current is not None and names and index is None:  # an item of a list of models
                names[-1] = f"{names[-1]}[{part}]"
                continue
            index = part if index is None else index
            continue
        names.append(str(part))
        index = None
        if current is not None and part in current.model_fields:
            owner, info = current, current.model_fields[part]
            current = _nested_model(info.annotation)
            keyed = current is not None and get_origin(_strip_optional(info.annotation)) is dict
        else:
            owner, info, current = current or owner, None, None
    return names, owner, info, index


def _nested_model(tp: Any) -> type[BaseModel] | None:
    tp = _strip_optional(tp)
    if get_origin(tp) is list and get_args(tp):  # list[Model]: its items are the model
        tp = get_args(tp)[0]
    elif get_origin(tp) is dict and len(get_args(tp)) == 2:  # dict[str, Model]: its values are
        tp = get_args(tp)[1]
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _strip_optional(tp: Any) -> Any:
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _is_tuple(tp: Any) -> bool:
    tp = _strip_optional(tp)
    if get_origin(tp) is typing.Annotated:
        tp = get_args(tp)[0]
    return tp is tuple or get_origin(tp) is tuple


def _lists_to_tuples(model: type[BaseModel], raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with lists given for tuple fields (also in nested models) made tuples."""
    out = dict(raw)
    for key, value in raw.items():
        info = model.model_fields.get(key) if isinstance(key, str) else None
        if info is None:
            continue
        nested = _nested_model(info.annotation)
        if isinstance(value, list) and _is_tuple(info.annotation):
            out[key] = tuple(value)
        elif nested is not None and isinstance(value, Mapping):
            out[key] = _lists_to_tuples(nested, dict(value))
    return out


@functools.cache
def _field_adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    """A strict validator of one field of ``model`` alone (type and constraints)."""
    info = model.model_fields[name]
    tp: Any = typing.Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    return TypeAdapter(tp, config=ConfigDict(strict=True))


def _flatten(metadata: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for m in metadata:
        if isinstance(m, FieldInfo):
            out += _flatten(m.metadata)
        elif isinstance(m, annotated_types.GroupedMetadata):
            out += _flatten(m)
        else:
            out.append(m)
    return out


def _num(v: Any) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def _bounds(meta: list[Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for m in meta:
        for attr in ("ge", "gt", "le", "lt", "min_length", "pattern"):
            value = getattr(m, attr, None)
            if value is not None:
                found[attr] = value
    return found


def _range(meta: list[Any], integer: bool, unit: str) -> str:
    b = _bounds(meta)
    u = f" {unit}" if unit else ""
    lo_key = "ge" if "ge" in b else "gt" if "gt" in b else None
    hi_key = "le" if "le" in b else "lt" if "lt" in b else None
    if lo_key and hi_key:
        lo, hi = b[lo_key], b[hi_key]
        if integer:
            lo = lo if lo_key == "ge" else lo + 1
            hi = hi if hi_key == "le" else hi - 1
            return f" in {lo}..{hi}{u}"
        return f" in {'[' if lo_key == 'ge' else '('}{_num(lo)}, {_num(hi)}{']' if hi_key == 'le' else ')'}{u}"
    for key, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if key in b:
            return f" {op} {_num(b[key])}{u}"
    return ""


def _phrase(tp: Any, meta: list[Any], unit: str, plural: bool) -> str:
    meta = _flatten(meta)
    if get_origin(tp) is typing.Annotated:
        base, *more = get_args(tp)
        return _phrase(base, meta + list(more), unit, plural)
    inner = _strip_optional(tp)
    if inner is not tp:
        return f"{_phrase(inner, meta, unit, plural)} or null"
    origin, args = get_origin(tp), get_args(tp)
    if tp is bool:
        return "true or false"
    if tp is int:
        return ("integers" if plural else "an integer") + _range(meta, True, unit)
    if tp is float:
        return ("numbers" if plural else "a number") + _range(meta, False, unit)
    if tp is str:
        pattern = _bounds(meta).get("pattern")
        return ("strings" if plural else "a string") + (f" matching {pattern}" if pattern else "")
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a tuple of {_phrase(args[0], [], unit, True)}"
        return f"a tuple of {len(args)} {_phrase(args[0], [], unit, True)}" if args else "a tuple"
    if origin is list:
        nonempty = "non-empty " if _bounds(meta).get("min_length", 0) >= 1 else ""
        return f"a {nonempty}list of {_phrase(args[0], [], unit, True)}" if args else f"a {nonempty}list"
    if origin in (dict, Mapping) or tp is dict:
        return "a mapping"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return f"a mapping of {tp.__name__} fields"
    return "a valid value"
