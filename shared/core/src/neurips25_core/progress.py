"""Progress bars that stay quiet off a terminal.

Long work shows a tqdm bar. In a terminal it refreshes as usual; when stderr is redirected to a
log file or CI output, the bar prints at most every ``NEURIPS25_PROGRESS_INTERVAL`` seconds
(default 30) and ``set_postfix`` never forces a refresh, so a 200-step training run writes a
handful of lines, not a thousand.

Example:
    >>> from neurips25_core.progress import progress_bar
    >>> for step in progress_bar(range(3), desc="demo", enabled=False):
    ...     pass
    >>> step
    2
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

from tqdm.auto import tqdm

__all__ = ["on_terminal", "progress_bar"]


def on_terminal() -> bool:
    """Whether stderr (where tqdm writes) is an interactive terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _quiet_interval() -> float:
    try:
        return float(os.environ.get("NEURIPS25_PROGRESS_INTERVAL", "30"))
    except ValueError:
        return 30.0


class _Bar(tqdm):
    """tqdm whose postfix updates wait for the next regular refresh off a terminal."""

    _loud = True

    def set_postfix(self, ordered_dict=None, refresh: bool | None = None, **kwargs: Any) -> None:
        super().set_postfix(
            ordered_dict, refresh=self._loud if refresh is None else refresh, **kwargs
        )

    def set_postfix_str(self, s: str = "", refresh: bool | None = None) -> None:
        super().set_postfix_str(s, refresh=self._loud if refresh is None else refresh)


def progress_bar(
    iterable: Iterable[Any] | None = None,
    total: int | None = None,
    desc: str = "",
    enabled: bool = True,
    **kwargs: Any,
) -> tqdm:
    """A tqdm bar: normal in a terminal, rare updates off one, nothing at all when not ``enabled``.

    Args:
        iterable: what to iterate over (or None and call ``update``).
        total: number of steps.
        desc: the label.
        enabled: False disables the bar (it still counts ``n``).
        **kwargs: passed to tqdm (``unit``, ``leave``, ...).
    """
    loud = on_terminal()
    kwargs.setdefault("dynamic_ncols", True)
    if not loud:
        kwargs.setdefault("mininterval", _quiet_interval())
        kwargs.setdefault("maxinterval", max(_quiet_interval(), 10.0) * 2)
    bar = _Bar(iterable, total=total, desc=desc, disable=not enabled, **kwargs)
    bar._loud = loud
    return bar
