"""Reading a file a person names: an apply document, a policy file, a file a document names.

Why not ``Path.read_text``: it reads whatever the path is. ``/dev/zero`` is read until
memory runs out, a FIFO blocks until something writes to it (forever, in a CronJob), and
a document's ``policy: {file: ../../etc/shadow}`` (or a symlink beside the document
pointing there) is read and its first line quoted back in the parse error. So every such
file is:

* opened without blocking (``O_NONBLOCK``: a FIFO opens at once) and refused unless the
  opened descriptor is a regular file (``fstat``: what is checked is what is read);
* refused when larger than the reader's limit, counting the bytes read as well as the
  size listed (a file that grows, or a device that reports 0, stops at the limit);
* with ``within``, refused unless its real path (symlinks followed, ``..`` applied) lies
  inside that folder's real path.
"""

from __future__ import annotations

import os
from pathlib import Path
from stat import S_ISREG


class UnreadableUserFile(ValueError):
    """A named file that is not read: missing, not a regular file, too large, outside its
    folder, or not UTF-8 text. The message names the path and the reason, never content."""


def _mebibytes(limit: int) -> str:
    return f"{limit / (1024 * 1024):g} MiB"


def read_user_file(path: Path, *, limit: int, within: Path | None = None) -> str:
    """The UTF-8 text of ``path`` (newlines made ``\\n``, as ``read_text`` makes them), or
    :class:`UnreadableUserFile` saying why not; see the module's docstring."""
    target = path
    if within is not None:
        target = Path(os.path.realpath(path))
        root = Path(os.path.realpath(within))
        if not target.is_relative_to(root):
            raise UnreadableUserFile(f"{path} lies outside {within} (through a symlink or '..')")
    try:
        descriptor = os.open(target, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise UnreadableUserFile(f"{path} cannot be read ({exc.strerror or exc})") from None
    try:
        status = os.fstat(descriptor)
        if not S_ISREG(status.st_mode):
            raise UnreadableUserFile(f"{path} is not a regular file")
        if status.st_size > limit:
            raise UnreadableUserFile(f"{path} is larger than {_mebibytes(limit)}")
        chunks, left = [], limit + 1  # one byte past the limit tells "too large" from "full"
        while left > 0 and (chunk := os.read(descriptor, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise UnreadableUserFile(f"{path} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(descriptor)
    if left <= 0:
        raise UnreadableUserFile(f"{path} is larger than {_mebibytes(limit)}")
    try:
        text = b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableUserFile(f"{path} is not UTF-8 text") from None
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text
