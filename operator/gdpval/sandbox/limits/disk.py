"""The workspace disk: a loop-mounted sparse ext4 image as root, else a tmpfs of the sandbox's own."""

from __future__ import annotations

import atexit
import ctypes
import errno
import fcntl
import functools
import os
import re
import shutil
import struct
import tempfile
from pathlib import Path

from gdpval.sandbox.limits import IMAGE_FILE, MNT_DETACH, MS_NOATIME, MS_NODEV, MS_NOSUID, OWNER_FILE, RUNTIME_PREFIX, libc, run_tool

MKFS = "/usr/sbin/mkfs.ext4"
MKFS_OPTIONS = "nodiscard,lazy_itable_init=1,lazy_journal_init=1,root_owner=0:0"
TEMPLATE_PREFIX = "gdpval-disk-"
# <linux/loop.h>
LOOP_CTL_GET_FREE = 0x4C82
LOOP_CONFIGURE = 0x4C0A
LOOP_CONFIG_SIZE = 8 + 232 + 64  # fd, block_size, struct loop_info64, reserved
LO_FLAGS_OFFSET = 8 + 52
LO_FLAGS_AUTOCLEAR = 4
MAX_INODES = 262_144  # files and folders of one workspace
INODE_RATIO = 16_384  # ext4's default bytes per inode, for small disks


@functools.cache
def loop_disk_support() -> str:
    """ "" when a loop-mounted image can hold /workspace (root with mkfs.ext4 and loop devices), else why not."""
    if os.geteuid() != 0:
        return "only root can loop-mount a per-sample disk"
    if not os.access(MKFS, os.X_OK):
        return f"{MKFS} is missing (Debian package: e2fsprogs)"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control)"
    return ""


def memory_workspace() -> bool:
    """Whether sandboxes get their /workspace as a tmpfs of their own (see the module's docstring)."""
    return os.geteuid() != 0


class LoopDisk:
    """A sparse ext4 image of the disk cap, loop-mounted (nosuid, nodev) on the host workspace folder.

    The file system is made once per process and per size (`_template`), then each sample gets a
    sparse copy attached and mounted by system calls: no mkfs or mount process per sample. Beside
    the image, `owner` holds the runner's pid, so a runner killed before unmounting leaves a mount
    the next one sweeps away (`sweep_orphan_disks`).
    """

    def __init__(self, image: Path, mountpoint: Path, size: int) -> None:
        self.image, self.mountpoint = image, mountpoint
        sweep_orphan_disks()
        (image.parent / OWNER_FILE).write_text(str(os.getpid()))
        _sparse_copy(_template(size), image)
        device, loop = _attach_loop(image)
        try:
            if libc().mount(os.fsencode(device), os.fsencode(mountpoint), b"ext4", MS_NOSUID | MS_NODEV | MS_NOATIME, None) != 0:
                raise OSError(ctypes.get_errno(), f"mounting {device} on {mountpoint}")
        finally:
            os.close(loop)  # autoclear: once unmounted, nothing holds the device and it frees itself
        (mountpoint / "lost+found").rmdir()

    def remove(self) -> None:
        """Detach the mount (the loop device clears itself when its last user is gone) and delete the image."""
        if os.path.ismount(self.mountpoint):
            libc().umount2(os.fsencode(self.mountpoint), MNT_DETACH)
        self.image.unlink(missing_ok=True)


@functools.cache
def _template(size: int) -> Path:
    """An empty ext4 image of `size` bytes, made once per process (deleted at exit, or by the next
    process when this one was killed).

    No journal, no reserve, no online-resize inode, inode tables initialised lazily: it holds under
    2 MB of data whatever its size, so copying it is cheap.
    """
    remove_orphans(Path(tempfile.gettempdir()), TEMPLATE_PREFIX)
    folder = Path(tempfile.mkdtemp(prefix=TEMPLATE_PREFIX))
    atexit.register(shutil.rmtree, folder, True)
    (folder / OWNER_FILE).write_text(str(os.getpid()))
    image = folder / IMAGE_FILE
    with open(image, "wb") as fh:
        fh.truncate(size)
    run_tool([MKFS, "-q", "-F", "-m", "0", "-N", str(min(MAX_INODES, size // INODE_RATIO)), "-O", "^has_journal,^resize_inode", "-E", MKFS_OPTIONS, str(image)])
    return image


def remove_orphans(base: Path, prefix: str) -> None:
    """Remove the folders `<base>/<prefix>*` whose owner file names a process that is gone (a killed runner's)."""
    for stale in base.glob(f"{prefix}*"):
        try:
            if not _alive(int((stale / OWNER_FILE).read_text())):
                shutil.rmtree(stale, ignore_errors=True)
        except (OSError, ValueError):
            continue


def _sparse_copy(src: Path, dest: Path) -> None:
    """Copy only the data extents of `src`; the holes stay holes."""
    fin = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
    fout = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        size = os.fstat(fin).st_size
        os.ftruncate(fout, size)
        offset = 0
        while offset < size:
            try:
                start = os.lseek(fin, offset, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after offset
                break
            end = os.lseek(fin, start, os.SEEK_HOLE)
            while start < end:
                start += os.pwrite(fout, os.pread(fin, min(end - start, 1 << 20), start), start)
            offset = end
    finally:
        os.close(fin)
        os.close(fout)


def _attach_loop(image: Path) -> tuple[str, int]:
    """A free loop device bound to `image` (LOOP_CONFIGURE, autoclear) and a descriptor that keeps it
    bound until closed; retried when another thread took the device first."""
    config = bytearray(LOOP_CONFIG_SIZE)
    struct.pack_into("=I", config, LO_FLAGS_OFFSET, LO_FLAGS_AUTOCLEAR)
    fd = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        struct.pack_into("=I", config, 0, fd)
        for _ in range(64):
            control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
            try:
                number = fcntl.ioctl(control, LOOP_CTL_GET_FREE)
            finally:
                os.close(control)
            device = f"/dev/loop{number}"
            loop = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            try:
                fcntl.ioctl(loop, LOOP_CONFIGURE, bytes(config))
                return device, loop
            except OSError as exc:
                os.close(loop)
                if exc.errno != errno.EBUSY:
                    raise
        raise OSError(errno.EBUSY, "no free loop device")
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.cache
def sweep_orphan_disks() -> None:
    """Unmount workspace images whose runner is gone (killed before its sandboxes stopped); once per process."""
    for line in os.fsdecode(Path("/proc/self/mountinfo").read_bytes()).split("\n"):  # a path may hold any bytes but these escapes
        fields = line.split(" ")
        source = fields[fields.index("-") + 2] if "-" in fields else ""
        if not source.startswith("/dev/loop"):
            continue
        try:
            image = Path(os.fsdecode(Path(f"/sys/block/{Path(source).name}/loop/backing_file").read_bytes()).removesuffix("\n"))
            owner = int((image.parent / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if image.name == IMAGE_FILE and image.parent.name.startswith(RUNTIME_PREFIX) and not _alive(owner):
            mountpoint = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # the kernel's octal escapes
            libc().umount2(os.fsencode(mountpoint), MNT_DETACH)
            shutil.rmtree(image.parent, ignore_errors=True)
