"""The block-log FUSE daemon: serves one disk image and logs every block write and flush (R-CRASH-1..4).

Run as its own process (``python -m capture_ledger.impl.study.kernel._daemon MOUNTPOINT LOG BASE``), as
root, before a loop device is attached to ``MOUNTPOINT/disk.img``. It serves two files:

- ``disk.img``: the image, held in memory, starting as the bytes of ``BASE``; every write is applied and
  logged (``blocklog`` ``W``), every ``fsync`` of it logged as a flush (``S``);
- ``ctl``: each write of ``MARK text`` appends a mark (``M``) to the log.

One request is served at a time, in the order the kernel queued them (``pyfuse3.main(1, 1)``), and a write
is answered only after it is applied and logged, so the log's order is the order the loop device saw. The
image is opened without the FUSE writeback cache and with ``direct_io`` (docs/crash.md §The kernel study:
a writeback cache would batch and widen writes). A mark written by the study after a system call returned
is logged after every block the call waited for.

Why a process of its own: a daemon thread inside the process that drives the mounted file system can
deadlock (a page fault taken with the GIL held waits on the loop device, which waits on the daemon).

Not guaranteed: discards and write-zeroes (refused: the kernel falls back to writing zeros), a size change
of the image (refused), or any use other than one loop device at a time.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
import sys
import time

import pyfuse3
import trio
from capture_ledger.impl.study.kernel._blocklog import FLUSH, MARK, WRITE, encode

__all__ = ["BlockLogFs", "main"]

_ROOT = pyfuse3.ROOT_INODE
_IMAGE, _CONTROL = _ROOT + 1, _ROOT + 2
_NAMES = {b"disk.img": _IMAGE, b"ctl": _CONTROL}


class BlockLogFs(pyfuse3.Operations):
    """The file system: ``disk.img`` (the logged image) and ``ctl`` (marks) in one root directory.

    Args:
        log: the log file to append records to.
        base: the image's initial bytes.
    """

    enable_writeback_cache = False

    def __init__(self, log: str, base: bytes) -> None:
        super().__init__()
        self.image = bytearray(base)
        self.log = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.seq = 0
        self.handles: dict[int, int] = {}
        self.next_handle = 10

    def _record(self, op: str, offset: int = 0, data: bytes = b"") -> None:
        self.seq += 1
        os.write(self.log, encode(op, self.seq, offset, data, time.monotonic_ns()))

    def _attributes(self, inode: int) -> pyfuse3.EntryAttributes:
        entry = pyfuse3.EntryAttributes()
        entry.st_ino = inode
        if inode == _ROOT:
            entry.st_mode = stat.S_IFDIR | 0o755
            entry.st_nlink = 2
        else:
            entry.st_mode = stat.S_IFREG | 0o644
            entry.st_nlink = 1
            entry.st_size = len(self.image) if inode == _IMAGE else 0
        entry.st_blksize = 4096
        entry.st_blocks = (entry.st_size + 511) // 512
        now = time.time_ns()
        entry.st_atime_ns = entry.st_mtime_ns = entry.st_ctime_ns = now
        entry.attr_timeout = 0
        entry.entry_timeout = 0
        return entry

    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        if inode not in (_ROOT, _IMAGE, _CONTROL):
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attributes(inode)

    async def lookup(
        self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        if parent_inode != _ROOT or name not in _NAMES:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return self._attributes(_NAMES[name])

    async def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: pyfuse3.RequestContext,
    ) -> pyfuse3.EntryAttributes:
        if fields.update_size and inode == _IMAGE and attr.st_size != len(self.image):
            raise pyfuse3.FUSEError(errno.EPERM)
        return self._attributes(inode)

    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        data = pyfuse3.StatvfsData()
        data.f_bsize = data.f_frsize = 4096
        data.f_blocks = len(self.image) // 4096
        data.f_namemax = 255
        return data

    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        if inode != _ROOT:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        for index, (name, inode) in enumerate(sorted(_NAMES.items())):
            if index < start_id:
                continue
            if not pyfuse3.readdir_reply(token, name, self._attributes(inode), index + 1):
                break

    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        if inode not in (_IMAGE, _CONTROL):
            raise pyfuse3.FUSEError(errno.EISDIR)
        handle = self.next_handle
        self.next_handle += 1
        self.handles[handle] = inode
        return pyfuse3.FileInfo(fh=handle, direct_io=True, keep_cache=False)

    async def read(self, fh: int, off: int, size: int) -> bytes:
        if self.handles.get(fh) != _IMAGE:
            return b""
        return bytes(self.image[off : off + size])

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        if self.handles.get(fh) == _CONTROL:
            command = bytes(buf).strip()
            if command.startswith(b"MARK "):
                self._record(MARK, 0, command[5:])
            return len(buf)
        end = off + len(buf)
        if end > len(self.image):
            raise pyfuse3.FUSEError(errno.ENOSPC)
        self.image[off:end] = buf
        self._record(WRITE, off, bytes(buf))
        return len(buf)

    async def fsync(self, fh: int, datasync: bool) -> None:
        if self.handles.get(fh) == _IMAGE:
            self._record(FLUSH)

    async def release(self, fh: int) -> None:
        self.handles.pop(fh, None)


def main(argv: list[str] | None = None) -> int:
    """Serve ``BASE`` at ``MOUNTPOINT/disk.img`` until unmounted, logging to ``LOG``.

    Args:
        argv: ``MOUNTPOINT LOG BASE`` (default: the process's arguments).

    Returns:
        0 once the file system was unmounted.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("mountpoint")
    parser.add_argument("log")
    parser.add_argument("base")
    args = parser.parse_args(argv)
    with open(args.base, "rb") as handle:
        base = handle.read()
    operations = BlockLogFs(args.log, base)
    options = set(pyfuse3.default_options)
    options.add("fsname=capture-ledger-blocklog")
    pyfuse3.init(operations, args.mountpoint, options)
    try:
        trio.run(pyfuse3.main, 1, 1)
    finally:
        pyfuse3.close(unmount=True)
        os.close(operations.log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
