"""One line from pydantic's validation errors: ``field.path: what is wrong, got VALUE; ...``.

Job files (``core/spec.py``) and profiles (``profiling/profile.py``) are validated by
pydantic models; a user reads the result as one CLI line, so each problem names its
field path and the value that broke the rule, unknown fields get a close match, the
noise of union branches is dropped, and a file with many problems lists the first few.
"""

from __future__ import annotations

import difflib

from pydantic import BaseModel, ValidationError

#: pydantic error types whose message already names the value (our validators' own), or
#: that have none to name
_NAMED_VALUE_ERRORS = {"value_error", "missing", "extra_forbidden"}
#: At most this many problems are listed; a file with more gets "and N more".
MAX_LISTED_ERRORS = 3


def describe_validation_error(exc: ValidationError, model: type[BaseModel]) -> str:
    """Turn pydantic's errors into one line: ``field.path: what is wrong, got VALUE; ...``."""
    errors = [(".".join(_plain_loc(e)), e) for e in exc.errors()]
    messages = []
    for field, error in errors:
        # a dict given where a union also allows a literal ("auto") fails both branches, and
        # a tuple whose items failed is also "too short": noise next to the real complaint
        if error["type"] in ("literal_error", "too_short") and any(
            other.startswith(field + ".") for other, _ in errors
        ):
            continue
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            loc = field.split(".")
            message = "unknown field" + _did_you_mean(loc[-1], _field_names(model, loc[:-1]))
        elif error["type"] == "missing":
            message = "required field is missing"
        elif error["type"] not in _NAMED_VALUE_ERRORS and _is_scalar(error.get("input")):
            message += f", got {error['input']!r}"
        messages.append(f"{field}: {message}" if field else message)
    unique = list(dict.fromkeys(messages))
    more = len(unique) - MAX_LISTED_ERRORS
    return "; ".join(unique[:MAX_LISTED_ERRORS]) + (f"; and {more} more" if more > 0 else "")


def _is_scalar(value: object) -> bool:
    return isinstance(value, (str, int, float)) and len(repr(value)) <= 60


def _plain_loc(error: dict) -> list[str]:
    return [str(part) for part in error["loc"] if not _is_union_tag(part)]


def _is_union_tag(part: object) -> bool:
    # pydantic names union branches in locations (e.g. "ShapeSpec", "literal['auto']")
    return isinstance(part, str) and (part[:1].isupper() or part.startswith("literal["))


def _field_names(model: type[BaseModel], path: list[str]) -> list[str]:
    for part in path:
        info = model.model_fields.get(part)
        annotation = getattr(info, "annotation", None)
        candidates = [a for a in getattr(annotation, "__args__", (annotation,)) if is_model(a)]
        if not candidates:
            return []
        model = candidates[0]
    names = []
    for name, info in model.model_fields.items():
        names.append(info.alias or name)
    return names


def is_model(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known fields: {', '.join(known)})" if known else ""
