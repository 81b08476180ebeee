"""The one error type a user sees: a message that says what is wrong and how to fix it."""

from __future__ import annotations

from collections.abc import Iterable


class FitplanError(ValueError):
    """Bad input or an impossible request. The CLI prints ``str(err)`` as one line, exit code 2."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        self.message = message
        self.hint = hint
        super().__init__(f"{message} ({hint})" if hint else message)


def closest(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The known names nearest to ``name`` (case-insensitive), for 'did you mean' hints."""
    import difflib  # only on the error path: not part of every command's start

    pool = sorted(set(choices))
    lowered = {c.lower(): c for c in pool}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.5)
    prefix = [c for c in pool if c.lower().startswith(name.lower()) and c.lower() not in hits]
    return [lowered[h] for h in hits] + prefix[: max(0, n - len(hits))]


def unknown_name(kind: str, name: str, choices: Iterable[str], list_cmd: str) -> FitplanError:
    suggestions = closest(name, choices)
    hint = f"did you mean {', '.join(suggestions)}? " if suggestions else ""
    return FitplanError(f"unknown {kind} '{name}'", f"{hint}see `{list_cmd}`")
