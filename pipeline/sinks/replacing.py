"""An earlier output replaced only once the new one is whole (``--overwrite``).

NOTE [ replaced when whole ]: ``--overwrite`` of an output that holds an
earlier run's rows - a Parquet, CSV, JSON Lines or ``.npy`` file, a data set - writes
the new output into a hidden folder beside it, ``.ortpipe-overwrite.<name>``,
under the same names (and its files beside it there too: a multi-output
``.npy``'s, a per-batch output's, a data set's side folders), and moves them
over the earlier ones only once the job wrote every row (``mark_complete``).
A run killed or stopped halfway leaves the earlier output whole, and
``--resume`` goes on with the new one in its folder.  The moves are a rename a
file (a folder: two, the earlier one set aside first); a marker written before
the first makes the next open of the output finish them where a kill cut them
short (:func:`finish_replacing`).  A Parquet file needs it as much as the
others: its journal is merged into the file at every close, a stopped or failed
run's too (NOTE [ journaled Parquet ]), so it is journaled in the staging folder
and the merged file moved up; a journal a killed earlier run left beside the
replaced file is removed with it (a later ``--resume`` would go on from it).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._handing_on import HandingOn
from ._parts import durable
from .journal import journal_of, remove_journal

#: the hidden folder beside an output that its replacement is written in
STAGING_PREFIX = ".ortpipe-overwrite."
#: in the staging folder: its files are whole and being moved over the earlier ones
_MOVING = "MOVING"
#: in the staging folder: an earlier folder set aside, removed once the moves are done
_REPLACED = ".replaced."


def staging_folder(path: str | Path) -> Path:
    """The hidden folder beside ``path`` its replacement is written in."""
    path = Path(path)
    return path.parent / f"{STAGING_PREFIX}{path.name}"


def replacement_of(path: str | Path) -> Path:
    """Where the replacement of the output ``path`` is written: the same name, in its staging folder."""
    return staging_folder(path) / Path(path).name


def replacement_under_way(path: str | Path) -> bool:
    """Whether an ``--overwrite`` of ``path`` was stopped before it was whole (its staging folder is there)."""
    return staging_folder(path).is_dir()


def finish_replacing(path: str | Path) -> bool:
    """Finish moving a whole replacement of ``path`` into place where a kill cut the
    moves short; True when it did."""
    folder = staging_folder(path)
    if not (folder / _MOVING).is_file():
        return False
    _move_up(folder)
    return True


def move_replacement_up(path: str | Path) -> None:
    """Move the whole replacement of ``path`` written in its staging folder over ``path`` (and
    anything written beside it there): what a writer that is not one of ortpipe's sinks (Ray's
    ``write_parquet``) calls once its output is whole."""
    _move_up(staging_folder(path))


def _move_up(folder: Path) -> None:
    """Every file and folder written in the staging ``folder`` over its namesake beside it, then the folder removed."""
    (folder / _MOVING).touch()
    durable(folder)
    beside = folder.parent
    for entry in sorted(folder.iterdir()):
        if entry.name == _MOVING or entry.name.startswith(_REPLACED):
            continue
        target = beside / entry.name
        remove_journal(journal_of(target))  # a killed earlier run's: of the file replaced, not of this one
        if entry.is_dir():
            if target.exists():  # a folder cannot be renamed over a full one: the earlier is set aside
                os.rename(target, folder / f"{_REPLACED}{entry.name}")
            os.rename(entry, target)
        else:
            os.replace(entry, target)
    durable(beside)
    shutil.rmtree(folder)


class ReplacingSink(HandingOn):
    """``sink``, written in the staging folder of ``path`` (:func:`replacement_of`),
    whose files replace the earlier ones beside it once the job wrote every row."""

    def __init__(self, sink: Any, path: str | Path) -> None:
        super().__init__(sink)
        #: the output this run replaces
        self.replaces = Path(path)

    def mark_complete(self) -> None:
        super().mark_complete()  # a data set's _SUCCESS, moved with it
        _move_up(staging_folder(self.replaces))

    @property
    def per_batch_paths(self) -> Mapping[str, Any]:
        """Where the outputs written per batch end up: beside the output, once it is whole
        (a stopped run leaves them in the staging folder with the rest)."""
        folder, beside = staging_folder(self.replaces), self.replaces.parent
        return {
            name: [
                beside / Path(path).relative_to(folder) if Path(path).is_relative_to(folder) else path for path in paths
            ]
            for name, paths in super().per_batch_paths.items()
        }
