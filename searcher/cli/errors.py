"""Turn an exception into the one line a user reads, or None for a genuine bug."""

from __future__ import annotations


def user_message(err: BaseException) -> str | None:
    from constraints.errors import FitplanError

    if isinstance(err, FitplanError):
        return str(err)
    from pydantic import ValidationError

    if isinstance(err, ValidationError):
        first = err.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "input"
        flag = "--" + where.replace("_", "-") if where.isidentifier() else where
        cause = first.get("ctx", {}).get("error") if first.get("type") == "value_error" else None
        if isinstance(cause, FitplanError):
            return str(cause)
        from constraints.limits import excerpt

        return f"{flag}: {first.get('msg', 'invalid value')} (got {excerpt(first.get('input'))})"
    if isinstance(err, OSError) and err.filename:
        return f"{err.strerror or err}: {err.filename}"
    return None
