"""Where the candidate may write, and who it runs as: a trusted harness's scratch directories.

Its only writable directory is a tmpfs of its own, capped in bytes and files, which the harness
mounts in a private mount namespace and drops with the candidate (a directory on disk, removed
however deep, where no namespace can be made). Run as root, the harness starts each candidate as
``NOBODY``, and shows it what only root may read (an interpreter under root's 0700 home) at
read-only binds here (``Scratch.visible``).
"""

import ctypes
import os
import py_compile
import shutil
import subprocess

# The candidate's module: compiled here once a harness (``Scratch.compiled``), shown to each candidate.
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_child.py")
# Who a candidate runs as when the evaluation runs as root: nobody. Under bubblewrap started by
# root, the sandbox's uid maps to uid 0 outside, and /proc/sys (the host's kernel settings:
# kernel.core_pattern runs a command as root) is writable from inside.
NOBODY = 65534


def candidate_user() -> dict:
    """``subprocess.Popen``'s arguments that start a candidate as ``NOBODY`` when this process
    is root (none otherwise: an ordinary user's candidate is that user, and no more)."""
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}


def remove_tree(path: str) -> None:
    """Remove ``path`` and everything beneath it, however deep or unreadable (coreutils walk
    trees with file descriptors: 13,779 nested directories are nothing to them; Python 3.11's
    ``shutil.rmtree`` recurses and fails)."""
    try:
        subprocess.run(["chmod", "-R", "u+rwx", path], stderr=subprocess.DEVNULL, check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", path], stderr=subprocess.DEVNULL, check=False)
    except FileNotFoundError:  # no coreutils
        shutil.rmtree(path, ignore_errors=True)


CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE, MNT_DETACH = 2, 4, 8, 1 << 14, 1 << 18, 2
MS_RDONLY, MS_REMOUNT, MS_BIND = 1, 32, 4096


def reachable_by_others(path: str) -> bool:
    """Whether any user may read ``path``: it and every directory above it let others in."""
    path = os.path.abspath(path)
    parents = [os.path.dirname(path)]
    while parents[-1] != os.path.dirname(parents[-1]):
        parents.append(os.path.dirname(parents[-1]))
    try:
        return (os.stat(path).st_mode & 0o004 != 0
                and all(os.stat(p).st_mode & 0o001 for p in parents))
    except OSError:
        return False


class Scratch:
    """The candidates' writable directories under ``base``: with a private mount namespace, each
    a tmpfs of its own (``file_bytes`` bytes, ``num_files`` files), gone when unmounted or when
    this process dies; else plain directories, removed with ``remove_tree``."""

    def __init__(self, base: str):
        self.base, self.made = base, 0
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.private = self.private_mounts()
        self.staged = {}
        self.child = self.compiled(CHILD)

    def compiled(self, source: str) -> str:
        """``source`` compiled once, beside the candidates' directories, readable by all: a
        candidate runs the bytecode (its file system is read-only, so it would compile the
        source again each time: 17 of the 42 ms a bubblewrap candidate took to start)."""
        path = os.path.join(self.base, os.path.basename(source) + "c")
        py_compile.compile(source, cfile=path, doraise=True)
        os.chmod(path, 0o644)
        return path

    def private_mounts(self) -> bool:
        """This process in a mount namespace of its own whose mounts nobody else sees."""
        uid, gid = os.getuid(), os.getgid()
        if self.libc.unshare(CLONE_NEWNS) != 0:  # root can; anyone else needs a user namespace
            if self.libc.unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0:
                return False
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        # Without this the mounts below would propagate to the machine's shared mounts.
        if self.libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
            return False
        # 0711: a candidate started as NOBODY (``candidate_user``) reaches its own directory below.
        return self.mount(self.base, "size=1m,nr_inodes=4096,mode=0711")

    def mount(self, path: str, options: str) -> bool:
        return self.libc.mount(b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options.encode()) == 0

    def visible(self, path: str) -> str:
        """Where a candidate started as ``NOBODY`` can read ``path``: the path itself where others
        may read it, else a read-only bind of it under this scratch directory (an interpreter
        under root's 0700 home, as pyenv and conda install it there). Binds live in this
        process's private mount namespace, so only as root, where a candidate is dropped."""
        if path not in self.staged:  # once a path: every candidate's start asks again
            self.staged[path] = path if not candidate_user() or reachable_by_others(path) else self.stage(path)
        return self.staged[path]

    def stage(self, path: str) -> str:
        if not self.private:
            raise OSError(f"{path} is not readable by others, and no mount namespace can be made to show it")
        target = os.path.join(self.base, f"stage-{len(self.staged)}")
        if os.path.isdir(path):
            os.mkdir(target, 0o755)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
        for flags in (MS_BIND | MS_REC, MS_BIND | MS_REMOUNT | MS_RDONLY):
            if self.libc.mount(path.encode(), target.encode(), None, flags, None) != 0:
                raise OSError(ctypes.get_errno(), f"cannot show {path} to the candidate at {target}")
        return target

    def describe(self, limits: dict) -> str:
        """What caps the candidate's writes, as ``Run.sandbox`` reports it."""
        if self.private:
            return f"writes: a tmpfs of its own, {limits['file_bytes']} bytes, {limits['num_files']} files"
        if limits["mode"] == "bubblewrap":
            return f"writes: bubblewrap's tmpfs, {limits['file_bytes']} bytes, files not capped"
        return f"writes: a directory on disk, {limits['file_bytes']} bytes a file, total bytes and files not capped"

    def make(self, limits: dict):
        """A new empty directory for one candidate; ``None`` when it is bubblewrap's to make."""
        if not self.private and limits["mode"] == "bubblewrap":
            return None  # bubblewrap's own tmpfs: capped in bytes, not in files
        self.made += 1
        path = os.path.join(self.base, str(self.made))
        os.mkdir(path, 0o700)
        owner = candidate_user()
        # nr_inodes counts the directory itself; the candidate owns its directory.
        options = f"size={limits['file_bytes']},nr_inodes={limits['num_files'] + 1},mode=0700" + (
            f",uid={owner['user']},gid={owner['group']}" if owner else "")
        if self.private and not self.mount(path, options):
            raise OSError(ctypes.get_errno(), "cannot mount a tmpfs for the candidate")
        if owner and not self.private:
            os.chown(path, owner["user"], owner["group"])
        return path

    def remove(self, path) -> None:
        if path is None:
            return
        if self.private:
            self.libc.umount2(path.encode(), MNT_DETACH)
            os.rmdir(path)
        else:
            remove_tree(path)
