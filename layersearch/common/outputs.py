"""Every file layersearch writes goes through here: checked before work starts, written whole.

:func:`check_output` turns an output argument into an :class:`OutputTarget` and raises a
LayersearchError before any long work when it cannot be written (a directory, a missing or
read-only folder: folders are never created; a name too long, a wrong suffix).
:func:`check_output_folder` does the same for a folder a command writes its files into.
:func:`write_outputs` then writes one or several files all or nothing:

- ``-`` streams to stdout, and a character device or FIFO (``/dev/stdout``, ``/dev/null``) is
  written in place: replacing a device node with a private file is never what a user meant;
  a FIFO that no process reads from is refused when checked (opening it would wait forever),
  and the end opened then is kept for the write, so the reader sees one stream;
- a symlink is written through: the file it points to is replaced, the link stays;
- a regular file is written to a temporary file beside it and renamed into place, so a crash
  never leaves a partial file; a new file gets the user's usual permissions (0666 minus the
  umask), a replaced one keeps its mode;
- several files (a CSV and its JSON) are all written to temporary files first and renamed only
  when every one succeeded; a failed rename puts back what was renamed before it.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from layersearch.common.errors import LayersearchError

STDOUT = "-"


@dataclass(frozen=True)
class OutputTarget:
    """A checked output: ``given`` as the user wrote it, ``real`` the file really written
    (symlinks resolved; None for stdout), ``stream`` True when written in place (stdout, device)."""

    given: str
    real: Path | None
    stream: bool
    make_folder: bool = False  # a default path of ours (plots/...): its one missing folder is made when written

    @property
    def to_stdout(self) -> bool:
        """True when the bytes go to this process's stdout."""
        return self.real is None

    def __str__(self) -> str:
        return "stdout" if self.to_stdout else self.given

    @property
    def file(self) -> Path:
        """The file written (``real``); raises LayersearchError for stdout, which has none."""
        if self.real is None:
            raise LayersearchError(f"{self.given} is stdout, not a file")
        return self.real

    def __fspath__(self) -> str:
        return self.given


def check_output(
    path: "str | Path | OutputTarget", what: str = "output", *, suffixes: Sequence[str] = (), default: bool = False,
) -> OutputTarget:
    """A writable output for ``path``; raises LayersearchError naming ``what`` (the argument, which
    the error's fields carry) otherwise; see :func:`_check_output`."""
    try:
        return _check_output(path, what, suffixes=suffixes, default=default)
    except LayersearchError as exc:
        raise LayersearchError(str(exc), fields=what) from None


def _check_output(
    path: "str | Path | OutputTarget", what: str, *, suffixes: Sequence[str] = (), default: bool = False,
) -> OutputTarget:
    """A writable output for ``path``; raises LayersearchError naming ``what`` otherwise.

    ``suffixes`` (e.g. ``(".png",)``) restricts the file name's suffix, so a PNG is never
    written under a JPEG name. A missing folder is refused, except for ``default`` paths (ours,
    such as ``plots/mask-x.png``), whose one missing folder is made when the file is written.
    Nothing is created here.
    """
    if isinstance(path, OutputTarget):
        return path
    if not isinstance(path, (str, os.PathLike)):
        raise LayersearchError(f"{what} must be a file name (str or Path), got {type(path).__name__}")
    given = os.fspath(path)
    if not given.strip():
        raise LayersearchError(f"{what} is empty: give a file name (or - for stdout)")
    if given == STDOUT:
        return OutputTarget(given, None, True)
    if "\0" in given:
        raise LayersearchError(f"{what} {given!r} contains a NUL character")
    check_file_name(given, what)
    real = Path(os.path.realpath(given))
    if suffixes and real.suffix.lower() not in suffixes and not _is_stream(real):
        raise LayersearchError(f"{what} {given} must end in {' or '.join(suffixes)} (the only format written)")
    try:
        st = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):
        return _new_file(real, given, what, default)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return _new_file(real, given, what, default)
        raise LayersearchError(f"cannot write {what} {given}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise LayersearchError(f"{what} {given} is a directory: give a file name inside it")
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        if not os.access(real, os.W_OK):
            raise LayersearchError(f"cannot write {what} {given}: permission denied")
        if stat.S_ISFIFO(st.st_mode):
            _hold_fifo(real, given, what)
        return OutputTarget(given, real, True)
    if not stat.S_ISREG(st.st_mode):
        raise LayersearchError(f"{what} {given} is not a regular file")
    if not os.access(real, os.W_OK):
        raise LayersearchError(f"cannot write {what} {given}: the file is read-only")
    if not os.access(real.parent, os.W_OK | os.X_OK):
        raise LayersearchError(f"cannot write {what} {given}: its folder {real.parent} is not writable")
    _probe_folder(real.parent, given, what)
    return OutputTarget(given, real, False)


#: Write ends of FIFOs opened by :func:`check_output`, kept open until written: closing one
#: would end the reader's stream before the data comes.
_FIFOS: dict[Path, int] = {}


def _hold_fifo(real: Path, given: str, what: str) -> None:
    """Open the FIFO ``real`` for writing without waiting; refuse it when no process reads from it."""
    if real in _FIFOS:
        return
    try:
        _FIFOS[real] = os.open(real, os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise LayersearchError(f"cannot write {what} {given}: it is a FIFO (named pipe) that no process reads from; "
                                   "give a regular file") from None
        raise LayersearchError(f"cannot write {what} {given}: {exc.strerror}") from None


def check_file_name(path: "str | Path", what: str = "output", *, prefix: bool = False) -> str:
    """``path`` when it can name a file; raises LayersearchError (naming the argument ``what``, which
    its fields carry) when it names a folder: an existing directory, a name ending in a separator,
    or ``.``, ``..``, ``/`` (no file name to write, nor to derive another name from, such as a
    report's ``.md`` and ``.png``). A ``prefix`` (of ``PREFIX.csv``) may be an existing folder's
    name: the files go beside it."""
    given = os.fspath(path)
    if given == STDOUT or _is_stream(Path(given)):
        return given
    if os.path.isdir(given) and not prefix:
        raise LayersearchError(f"{what} {given} is a directory: give a file name inside it", fields=what)
    if given.endswith(("/", os.sep)) or Path(given).name in ("", ".", ".."):
        raise LayersearchError(f"{what} {given} names a folder, not a file: give a file name inside it", fields=what)
    return given


def check_output_folder(path: "str | Path", what: str = "output folder") -> Path:
    """The folder ``path`` a command writes its files into, checked before any work as a file's
    folder is (:func:`_probe_folder`): an existing folder that takes a new file, or a missing one
    whose nearest existing folder does (made when the files are written). A file, a path under
    a file, a folder that takes no file (``/proc``, a read-only mount) is one error naming ``what``."""
    if not isinstance(path, (str, os.PathLike)):
        raise LayersearchError(f"{what} must be a folder name (str or Path), got {type(path).__name__}", fields=what)
    given = os.fspath(path)
    if not given.strip():
        raise LayersearchError(f"{what} is empty: give a folder name", fields=what)
    if "\0" in given:
        raise LayersearchError(f"{what} {given!r} contains a NUL character", fields=what)
    real = Path(os.path.realpath(os.path.expanduser(given)))
    if os.path.lexists(real) and not real.is_dir():
        raise LayersearchError(f"{what} {given} is a file, not a folder: give a folder name", fields=what)
    nearest = real
    while not nearest.exists() and nearest != nearest.parent:
        size, limit = len(nearest.name.encode("utf-8", "surrogateescape")), _name_max(nearest.parent)
        if size > limit:
            raise LayersearchError(f"{what}: folder name too long ({size} bytes, at most {limit})", fields=what)
        nearest = nearest.parent
    if not nearest.is_dir():
        raise LayersearchError(f"cannot write {what} {given}: {nearest} is not a directory", fields=what)
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise LayersearchError(f"cannot write {what} {given}: folder {nearest} is not writable", fields=what)
    try:
        _probe_folder(nearest, given, what)
    except LayersearchError as exc:
        raise LayersearchError(str(exc), fields=what) from None
    return real


def _new_file(real: Path, given: str, what: str, default: bool) -> OutputTarget:
    """The target of a file that does not exist yet; a default path may lack its last folder."""
    if default and not real.parent.exists() and real.parent.parent.is_dir():
        _check_new_file(real.parent, given, what)  # the folder is created in an existing, writable one
        return OutputTarget(given, real, False, make_folder=True)
    return OutputTarget(given, _check_new_file(real, given, what), False)


def _check_new_file(real: Path, given: str, what: str) -> Path:
    """Checks for a file that does not exist yet: its name's length and the nearest existing folder."""
    limit = _name_max(real.parent)
    if len(real.name.encode("utf-8", "surrogateescape")) > limit:
        raise LayersearchError(f"{what}: file name too long ({len(real.name)} characters, at most {limit})")
    if len(os.fsencode(real)) > 4095:
        raise LayersearchError(f"{what}: path too long ({len(str(real))} characters)")
    folder = real.parent
    if not folder.exists():  # never created: a typo in a folder name must not grow a tree of folders
        ancestor = folder
        while not ancestor.exists() and ancestor != ancestor.parent:
            if ancestor.is_symlink():  # a dangling link in the middle of the path
                raise LayersearchError(f"cannot write {what} {given}: {ancestor} is a broken link")
            ancestor = ancestor.parent
        if ancestor.exists() and not ancestor.is_dir():
            raise LayersearchError(f"cannot write {what} {given}: {ancestor} is not a directory")
        raise LayersearchError(f"cannot write {what} {given}: folder {folder} does not exist (create it first)")
    if not folder.is_dir():
        raise LayersearchError(f"cannot write {what} {given}: {folder} is not a directory")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise LayersearchError(f"cannot write {what} {given}: folder {folder} is not writable")
    _probe_folder(folder, given, what)
    return real


def _probe_folder(folder: Path, given: str, what: str) -> None:
    """Create and remove a file in ``folder``, as the write will (a temp file renamed into place):
    permission bits do not tell everything (``/proc``, a read-only mount, root on a full disk),
    and the work a command does before writing must not be lost to it."""
    probe = folder / f".layersearch-{uuid.uuid4().hex[:12]}.tmp"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        raise LayersearchError(f"cannot write {what} {given}: folder {folder} takes no new file "
                               f"({exc.strerror or exc})") from None
    try:
        os.unlink(probe)
    except OSError:
        pass  # created but not removable: the write replaces files the same way, so it will tell


def _name_max(folder: Path) -> int:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


def _is_stream(real: Path) -> bool:
    try:
        mode = os.stat(real).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def write_output(path: "str | Path | OutputTarget", data: str | bytes, what: str = "output") -> OutputTarget:
    """Write ``data`` (text is UTF-8) to one checked output; see the module docstring."""
    return write_outputs([(path, data)], what)[0]


def write_outputs(items: Sequence[tuple["str | Path | OutputTarget", str | bytes]], what: str = "output") -> list[OutputTarget]:
    """Write several outputs all or nothing (streams last, once every file is in place)."""
    targets = [check_output(path, what) for path, _ in items]
    payloads = [data.encode("utf-8") if isinstance(data, str) else bytes(data) for _, data in items]
    files = [(t, d) for t, d in zip(targets, payloads) if not t.stream]
    temps: list[Path] = []
    try:
        for target, data in files:
            if target.make_folder:
                target.file.parent.mkdir(exist_ok=True)
            temps.append(_write_temp(target.file, data))
        _replace_all([(tmp, target.file) for tmp, (target, _) in zip(temps, files)])
    except OSError as exc:
        raise LayersearchError(f"cannot write {_failed_name(exc, files)}: {exc.strerror or exc}; nothing was written") from None
    finally:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
    for target, data in zip(targets, payloads):
        if target.stream:
            _write_stream(target, data)
    return targets


def _write_temp(real: Path, data: bytes) -> Path:
    """``data`` in a new file beside ``real`` with the mode ``real`` will have; fsynced."""
    mode = _mode_for(real)
    tmp = real.parent / f".layersearch-{uuid.uuid4().hex[:12]}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _mode_for(real: Path) -> int:
    """The existing file's mode, else 0666 minus the umask (what ``open`` would give)."""
    try:
        return stat.S_IMODE(os.stat(real).st_mode)
    except OSError:
        mask = os.umask(0o022)
        os.umask(mask)
        return 0o666 & ~mask


def _replace_all(pairs: Sequence[tuple[Path, Path]]) -> None:
    """Rename each temp onto its target; on a failure put back the targets already replaced."""
    done: list[tuple[Path, Path | None]] = []  # (target, backup of its old content or None)
    try:
        for tmp, real in pairs:
            backup = None
            if len(pairs) > 1 and real.exists():
                backup = real.parent / f".layersearch-{uuid.uuid4().hex[:12]}.bak"
                os.link(real, backup)
            os.replace(tmp, real)
            done.append((real, backup))
    except BaseException:
        for real, backup in reversed(done):
            if backup is not None:
                os.replace(backup, real)
            else:
                real.unlink(missing_ok=True)
        raise
    finally:
        for _, backup in done:
            if backup is not None:
                backup.unlink(missing_ok=True)


def _write_stream(target: OutputTarget, data: bytes) -> None:
    real = target.real
    if real is None:  # stdout
        sys.stdout.flush()
        out = getattr(sys.stdout, "buffer", None)
        if out is None:  # a text-only stream (tests capturing stdout)
            sys.stdout.write(data.decode("utf-8", "replace"))
        else:
            out.write(data)
        sys.stdout.flush()
        return
    try:
        if stat.S_ISFIFO(os.stat(real).st_mode) and real not in _FIFOS:
            _hold_fifo(real, target.given, "output")
        fd = _FIFOS.pop(real, None)
        if fd is not None:
            os.set_blocking(fd, True)  # a reader is there: wait for it to take the data
        with (os.fdopen(fd, "wb") if fd is not None else open(real, "wb")) as handle:
            handle.write(data)
    except OSError as exc:
        raise LayersearchError(f"cannot write {target.given}: {exc.strerror}") from None


def _failed_name(exc: OSError, files: Sequence[tuple[OutputTarget, bytes]]) -> str:
    name = exc.filename if isinstance(exc.filename, str) else None
    for target, _ in files:
        if name is not None and target.real is not None and Path(name).parent == target.real.parent:
            return target.given
    return files[0][0].given if files else "output"


def check_distinct(outputs: Sequence[tuple[str, "str | Path"]], inputs: Sequence[tuple[str, "str | Path"]] = ()) -> None:
    """Raise LayersearchError when an output is, by resolved path (symlinks followed) or as a hard
    link, one of ``inputs`` or another output: each pair is (the option, as the user names it;
    the path). Streams (``-``, a device, a FIFO) are left out: writing one destroys nothing."""
    seen: list[tuple[str, str, frozenset[object]]] = []
    for label, path in outputs:
        keys = _identity(path)
        if keys is None:
            continue
        for other_label, other_path, other_keys in seen:
            if keys & other_keys:
                raise LayersearchError(f"{label} {path} and {other_label} {other_path} are the same file: "
                                       "one would overwrite the other; give each its own name")
        seen.append((label, os.fspath(path), keys))
    for label, path in inputs:
        keys = _identity(path)
        if keys is None:
            continue
        for out_label, out_path, out_keys in seen:
            if keys & out_keys:
                raise LayersearchError(f"{out_label} {out_path} is the {label} input {path}: writing it would destroy "
                                       "that input; give the output another name")


def _identity(path: "str | Path") -> "frozenset[object] | None":
    """What makes two names the same file: the resolved path, and (dev, inode) when it exists;
    None for a stream."""
    given = os.fspath(path)
    if not given or given == STDOUT or "\0" in given:
        return None
    real = os.path.realpath(given)
    try:
        st = os.stat(real)
    except OSError:
        return frozenset({real})
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        return None
    return frozenset({real, (st.st_dev, st.st_ino)})


def umask_modes(folder: "str | Path", top_mode: int | None = None) -> None:
    """Give ``folder`` and everything under it the modes a plain ``mkdir`` / ``open`` gives under the
    user's umask (0777 / 0666 minus it): libraries save some files private (0600) and temporary
    folders are made 0700. ``top_mode``: the mode ``folder`` itself gets instead (an existing
    empty folder it replaces keeps its own)."""
    mask = os.umask(0o022)
    os.umask(mask)
    for root, dirs, files in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o777 & ~mask)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                os.chmod(path, 0o666 & ~mask)
    os.chmod(folder, (0o777 & ~mask) if top_mode is None else top_mode)


def announce(target: OutputTarget, message: str) -> None:
    """Print a "wrote ..." note: on stdout, or on stderr when the output itself went to stdout."""
    print(message, file=sys.stderr if target.to_stdout else sys.stdout, flush=True)


__all__ = ["OutputTarget", "STDOUT", "announce", "check_distinct", "check_file_name", "check_output", "umask_modes",
           "write_output", "write_outputs"]
