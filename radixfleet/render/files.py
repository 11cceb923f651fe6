"""Generated files on disk: written all or nothing, and removed only when render wrote them.

Every folder render writes holds `.radixfleet-generated`, the list of the files it generated
there. A later render removes exactly the listed files it no longer produces: anything else in
the folder (the catalog, Python sources, a user's notes) is never touched, whatever it says.
Nor is anything outside it: render neither writes nor removes through a symbolic link (a
subfolder linked elsewhere stops the render with an error and leaves a stale file in place).

Writing is all or nothing: every file is first staged beside its target, and only when all are
staged are they renamed into place (a rename within a folder is atomic). A full disk, a
read-only folder or a file where a folder goes leaves the tree as it was.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

LISTING = ".radixfleet-generated"
LISTING_HEADER = "# The files `radixfleet render` generated in this folder; it removes only these."

# A folder and the files to generate in it: relative POSIX path -> text.
Folders = Mapping[Path, Mapping[str, str]]


def write_folders(folders: Folders) -> dict[Path, list[Path]]:
    """Write every folder's files (all or nothing), then remove what each folder's listing
    says render generated before and no longer does; the paths written, by folder."""
    staged = _stage_all(folders)
    for temporary, target in staged:
        temporary.replace(target)
    for folder, files in folders.items():
        _remove_stale(folder, files)
        _write_text(folder / LISTING, "\n".join([LISTING_HEADER, *sorted(files)]) + "\n")
    return {folder: [folder / rel for rel in sorted(files)] for folder, files in folders.items()}


def listed(folder: Path) -> list[str]:
    """The files the folder's listing names (none without a listing)."""
    try:
        lines = (folder / LISTING).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    return [line for line in lines if line and not line.startswith("#")]


def _stage_all(folders: Folders) -> list[tuple[Path, Path]]:
    staged: list[tuple[Path, Path]] = []
    created: list[Path] = []
    ready: set[Path] = set()  # folders known to exist: 20,000 files share a few hundred
    try:
        for folder, files in folders.items():
            for rel, text in sorted(files.items()):
                target = folder / rel
                if _through_symlink(folder, rel):
                    raise _symlink_error(folder, rel)
                if target.parent not in ready:
                    created += _make_parents(target.parent)
                    ready.add(target.parent)
                staged.append((_stage(target, text), target))
    except OSError:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
        for made in reversed(created):  # folders made for this render only, now empty again
            with contextlib.suppress(OSError):  # never hide the error that stopped the render
                made.rmdir()
        raise
    return staged


def _symlink_error(folder: Path, rel: str) -> OSError:
    message = f"{folder / rel}: a symbolic link on the way; render writes only inside {folder}"
    return OSError(message)


def _make_parents(folder: Path) -> list[Path]:
    """Create `folder` and missing parents; the ones created, outermost first."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    return list(reversed(missing))


# Staged files are named `.NAME.PID-RENDER.tmp`: unique to this render, so creating one
# exclusively never meets a leftover of another. (tempfile.mkstemp did the same with a random
# name per file, at a third of the write time of 20,000 files, and mode 0600.)
_RENDER = f"{os.getpid()}-{secrets.token_hex(4)}"
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


def _stage(target: Path, text: str) -> Path:
    """`text` in a new file beside `target`, with the mode a plain write gets (0666 less the
    umask): rendered manifests are read by kubectl and reviewers, not secret."""
    staged = target.with_name(f".{target.name}.{_RENDER}.tmp")
    fd = os.open(staged, _NEW_FILE, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode())
    except OSError:
        staged.unlink(missing_ok=True)
        raise
    return staged


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _stage(path, text).replace(path)


def _remove_stale(folder: Path, files: Iterable[str]) -> None:
    keep = set(files)
    for rel in listed(folder):
        if rel in keep or not _inside(rel):
            continue  # a listing edited to reach outside its folder is not followed
        stale = folder / rel
        if stale.is_file() and not _through_symlink(folder, rel):
            stale.unlink()


def _inside(rel: str) -> bool:
    path = PurePosixPath(rel)
    return not path.is_absolute() and ".." not in path.parts


def _through_symlink(folder: Path, rel: str) -> bool:
    """Whether any part of `rel` under `folder` (a subfolder or the file) is a symbolic link:
    render then would read, write or remove something outside the folder it was given."""
    parts = PurePosixPath(rel).parts
    return any((folder.joinpath(*parts[: i + 1])).is_symlink() for i in range(len(parts)))
