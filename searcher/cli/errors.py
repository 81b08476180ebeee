"""Turn an exception into the one line a user reads, or None for a genuine bug."""

from __future__ import annotations

import sys


def user_message(err: BaseException) -> str | None:
    from constraints.errors import FitplanError

    if isinstance(err, FitplanError):
        return str(err)
    from constraints.limits import excerpt
    from constraints.record import InvalidField

    if isinstance(err, InvalidField):  # a record's field, named as its flag
        if err.cause is not None:
            return str(err.cause)
        flag = "--" + err.field.replace("_", "-") if err.field.isidentifier() else err.field
        return f"{flag}: {err.msg} (got {excerpt(err.value)})"
    if "pydantic" not in sys.modules:  # no pydantic model was built, so none failed
        return _os_message(err)
    from pydantic import ValidationError

    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "input"
        flag = "--" + where.replace("_", "-") if where.isidentifier() else where
        cause = first.get("ctx", {}).get("error") if first.get("type") == "value_error" else None
        if isinstance(cause, FitplanError):
            return str(cause)
        return f"{flag}: {first.get('msg', 'invalid value')} (got {excerpt(first.get('input'))})"
    return _os_message(err)


def _os_message(err: BaseException) -> str | None:
    if isinstance(err, OSError) and err.filename:
        return f"{err.strerror or err}: {err.filename}"
    return None
