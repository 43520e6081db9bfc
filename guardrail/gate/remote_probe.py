"""The fixed probe program a remote backend runs inside the agent's sandbox: stats, listings and reads, nothing else.

`guardrail.gate.backend_remote` runs this file's source, unchanged, as
``PYTHON -I -S -B -c <source> GR1 <hex>...`` with the sandbox's system interpreter (never one under the
workspace roots). The request is data: a marshal'd tuple of operations, hex-encoded in argv; nothing
in it is ever run, formatted into a shell line or imported. The program imports only modules built
into the interpreter, writes nothing, opens only directories and regular files, for reading,
non-blocking (a FIFO or device is stat'ed through an ``O_PATH`` handle, never opened), and answers
one line on stdout: ``GR1 `` and a JSON array in which every string is hex-encoded, so no byte a
filename holds can break the framing. It is also the one copy of the confinement code: the roots test
(`Roots`), the verified stat, the listing and the bounded read are the functions
`guardrail.gate.backend.LocalBackend` runs on this machine (it imports this dependency-free module), so the
sandbox and the local backend answer by the same code.
"""

import errno
import marshal
import os
import stat
import sys
import time

MAGIC = "GR1"
_O_PATH = getattr(os, "O_PATH", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_PROC_FD = "/proc/self/fd"
_HAS_PROC_FD = os.path.isdir(_PROC_FD)
_PSEUDO_ROOTS = ("/proc/", "/sys/", "/dev/")
# Answers that are not one (negative integers: no other answer is a bare integer)
_OUT_OF_TIME = -1  # an operation the request's time allowance did not reach
_TOO_BIG = -2  # an answer that would pass the request's byte cap
_SAME = -3  # unchanged since the answer the asker holds
_UNSUPPORTED = -4
_FAILED = -5  # the operation raised
_SKIPPED = -6  # an answer nobody asked for yet, left out because it is big


def _prefixes(roots):
    return tuple(root if root == "/" else root + "/" for root in roots)


class Roots:
    """`guardrail.gate.backend.Roots`, rebuilt from its five fields."""

    def __init__(self, lexical, real, trusted, untrusted, pairs):
        self.names = frozenset(lexical + real)
        self.lexical = _prefixes(lexical + real)
        self.real_set = frozenset(real)
        self.real = _prefixes(real)
        self.trusted_names = trusted
        self.trusted = _prefixes(trusted)
        self.untrusted_names = frozenset(untrusted)
        self.untrusted = _prefixes(untrusted)
        starts = [(a, b) for a, b in pairs] + [(b, b) for _, b in pairs]
        self.starts = tuple(sorted(set(starts), key=lambda pair: -len(pair[0])))

    def holds_lexically(self, path):
        return path in self.names or path.startswith(self.lexical)

    def holds_really(self, real):
        return real in self.real_set or real.startswith(self.real)

    def start_of(self, path):
        for lexical, real in self.starts:
            if path == lexical or path.startswith(lexical if lexical == "/" else lexical + "/"):
                return lexical, real
        return None

    def trusts(self, path):
        if not path.startswith(self.trusted) and path not in self.trusted_names:
            return False
        return path not in self.untrusted_names and not path.startswith(self.untrusted)


# ---------------------------------------------------------------------------------------------------- stat
def _kind(mode):
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"


def _state(st):
    return (_kind(st.st_mode), st.st_mtime_ns, st.st_size, bool(st.st_mode & 0o111), "")


def _failed(exc):
    if exc.errno == errno.ENOENT:
        return ("missing", 0, 0, False, "")
    if exc.errno == errno.ENOTDIR:
        return ("missing", 0, 0, False, "a parent is a file, not a directory")
    if exc.errno == errno.ELOOP:
        return ("loop", 0, 0, False, "symlink loop")
    if exc.errno == errno.ENAMETOOLONG:
        return ("missing", 0, 0, False, "name too long")
    return ("unknown", 0, 0, False, type(exc).__name__ + ": " + str(exc.strerror))


def _missing_parent(exc):
    if exc.errno == errno.ELOOP:
        return ("loop", 0, 0, False, "symlink loop")
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
        return ("missing", 0, 0, False, "")
    return ("unknown", 0, 0, False, type(exc).__name__ + ": " + str(exc.strerror))


def _plain_stat(path):
    try:
        return _state(os.stat(path))
    except OSError as exc:
        return _failed(exc)
    except (ValueError, TypeError) as exc:
        return ("missing", 0, 0, False, "invalid path: " + str(exc))


def _stat_verified(path, roots, memo):
    """Walk the path's components from its root with lstat, resolving every symlink met (LocalBackend's walk)."""
    start = roots.start_of(path)
    if start is None:
        if not roots.holds_really(os.path.realpath(path)):
            return ("outside", 0, 0, False, "")
        return _plain_stat(path)
    current, real = start
    parts = [part for part in path[len(current):].split("/") if part]
    st = None
    for index, part in enumerate(parts):
        current = current + "/" + part if current != "/" else "/" + part
        last = index == len(parts) - 1
        known = None if last else memo.get(current)
        if known is not None:
            real = known
            continue
        try:
            st = os.lstat(current)
        except OSError as exc:
            return _failed(exc) if last else _missing_parent(exc)
        if stat.S_ISLNK(st.st_mode):
            real = os.path.realpath(current)
            if not roots.holds_really(real):
                return ("outside", 0, 0, False, "")
            try:
                st = os.stat(current)
            except OSError as exc:
                return _failed(exc) if last else _missing_parent(exc)
        else:
            real = real + "/" + part if real != "/" else "/" + part
        if not last:
            if not stat.S_ISDIR(st.st_mode):
                return ("missing", 0, 0, False, "a parent is a file, not a directory")
            memo[current] = real
    if not parts:
        return _plain_stat(path)
    return _state(st)


def op_stat(path, roots, memo):
    if roots is None or roots.trusts(path):
        return _plain_stat(path)
    try:
        return _stat_verified(path, roots, memo)
    except (ValueError, TypeError) as exc:
        return ("missing", 0, 0, False, "invalid path: " + str(exc))


def op_stat_context(path, roots, memo, limit, names, stop):
    """The path's stat; when it is not there, also the stats of its ancestors up to the nearest directory (or the
    edge of the roots) and that directory's listing, if it holds at most `names` entries: what the gate's hint
    for a missing path asks next."""
    state = op_stat(path, roots, memo)
    if state[0] in ("file", "dir", "other", "outside"):
        return [state, [], None]
    ancestors = []
    ancestor = os.path.dirname(path)
    kind = "missing"
    while ancestor:
        if roots is not None and not roots.holds_lexically(ancestor):
            kind = "outside"
            break
        found = op_stat(ancestor, roots, memo)
        ancestors.append([ancestor, found])
        kind = found[0]
        if kind in ("dir", "outside") or ancestor == os.path.dirname(ancestor):
            break
        ancestor = os.path.dirname(ancestor)
    listing = op_list(ancestor, roots, limit, stop) if kind == "dir" else None
    if isinstance(listing, tuple) and len(listing[1]) > names:
        listing = _SKIPPED
    return [state, ancestors, listing]


# ---------------------------------------------------------------------------------------------------- list
def _fd_path(fd):
    if not _HAS_PROC_FD:
        return None
    try:
        return os.readlink(_PROC_FD + "/" + str(fd))
    except OSError:
        return None


def op_list(path, roots, limit, stop):
    """(mtime_ns, names) of a directory under the roots, or None (missing, outside, unreadable, over `limit`)."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC | _O_NONBLOCK)
    except (OSError, ValueError, TypeError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            return None
        if roots is not None:
            real = _fd_path(fd) or os.path.realpath(path)
            if not roots.holds_really(real):
                return None
        names = []
        with os.scandir(fd) as entries:
            for count, entry in enumerate(entries, 1):
                if count > limit:
                    return None
                if not count & 4095 and time.monotonic() > stop:
                    return _OUT_OF_TIME
                names.append(entry.name)
        return (st.st_mtime_ns, names)
    except OSError:
        return None
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------------- read
def _read_fd(fd, limit):
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def op_read(path, roots, limit):
    """Up to `limit` + 1 bytes of a regular file under the roots, or None."""
    if not _O_PATH or not _HAS_PROC_FD:
        real = os.path.realpath(path)
        if real.startswith(_PSEUDO_ROOTS) or (roots is not None and not roots.holds_really(real)):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC)
        except OSError:
            return None
        return _read_fd(fd, limit)
    try:
        handle = os.open(path, _O_PATH | _O_CLOEXEC)
    except (OSError, ValueError, TypeError):
        return None
    try:
        st = os.fstat(handle)
        real = _fd_path(handle)
        if not stat.S_ISREG(st.st_mode) or real is None or real.startswith(_PSEUDO_ROOTS):
            return None
        if roots is not None and not roots.holds_really(real):
            return None
        # Reopen the very inode the handle holds: a FIFO or device swapped in after the check is never opened.
        fd = os.open(_PROC_FD + "/" + str(handle), os.O_RDONLY | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC)
    except OSError:
        return None
    finally:
        os.close(handle)
    return _read_fd(fd, limit)


# ---------------------------------------------------------------------------------------------------- walk
def op_walk(root, roots, limit, skip, stop):
    """Relative paths of regular files under `root` (LocalBackend.walk), stopping at `stop`."""
    if roots is not None and not (roots.holds_lexically(root) and roots.holds_really(os.path.realpath(root))):
        return []
    found = []
    stack = [(root, 0)]
    seen = 0
    cut = len(root) + (0 if root.endswith("/") else 1)
    while stack and len(found) < limit:
        directory, depth = stack.pop()
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    seen += 1
                    if not seen & 511 and time.monotonic() > stop:
                        return found
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if depth < 12 and entry.name not in skip and not entry.name.startswith("."):
                                stack.append((entry.path, depth + 1))
                        elif entry.is_file(follow_symlinks=False):
                            found.append(entry.path[cut:])
                            if len(found) >= limit:
                                break
                    except OSError:
                        continue
        except OSError:
            continue
    return found


# ---------------------------------------------------------------------------------------------------- answer
def _encode(value, out):
    """JSON with every string hex-encoded (str as UTF-8 with surrogateescape, bytes as they are)."""
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, str):
        try:
            raw = value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            raw = value.encode("utf-8", "surrogatepass")
        out.append('"' + raw.hex() + '"')
    elif isinstance(value, bytes):
        out.append('"' + value.hex() + '"')
    else:
        out.append("[")
        for position, item in enumerate(value):
            if position:
                out.append(",")
            _encode(item, out)
        out.append("]")


def _size(value):
    """About how many bytes `value` takes once encoded."""
    if isinstance(value, str) or isinstance(value, bytes):
        return 2 * len(value) + 3
    if isinstance(value, list) or isinstance(value, tuple):
        return sum(_size(item) for item in value) + 2
    return 8


def answer(request):
    """The answers to one request: (allowance_s, max_bytes, roots table, operations)."""
    allowance, max_bytes, table, operations = request
    stop = time.monotonic() + allowance
    roots = [Roots(*fields) for fields in table]
    memo = {}
    answers = []
    budget = max_bytes
    for operation in operations:
        name = operation[0]
        if time.monotonic() > stop:
            answers.append(_OUT_OF_TIME)
            continue
        scope = roots[operation[2]] if len(operation) > 2 and operation[2] >= 0 else None
        try:
            if name == "s":
                result = op_stat(operation[1], scope, memo)
            elif name == "l":
                result = op_list(operation[1], scope, operation[3], stop)
            elif name == "lc":  # list again only when the directory changed since the listing held
                state = op_stat(operation[1], scope, memo)
                result = _SAME if state[0] == "dir" and state[1] == operation[4] else op_list(
                    operation[1], scope, operation[3], stop)
            elif name == "sr":  # a stat, and a small file's content unless the asker holds it already
                state = op_stat(operation[1], scope, memo)
                held = state[0] == "file" and (state[1], state[2]) == (operation[4], operation[5])
                content = _SAME if held else op_read(operation[1], scope, operation[3]) \
                    if state[0] == "file" and state[2] <= operation[3] else _SKIPPED
                result = [state, content]
            elif name == "sx":  # a stat, and for a path that is not there what a hint about it will look at
                result = op_stat_context(operation[1], scope, memo, operation[3], operation[4], stop)
            elif name == "r":
                result = op_read(operation[1], scope, operation[3])
            elif name == "rc":  # read again only when the file changed since the content held
                state = op_stat(operation[1], scope, memo)
                result = _SAME if state[0] == "file" and (state[1], state[2]) == (operation[4], operation[5]) \
                    else op_read(operation[1], scope, operation[3])
            elif name == "w":
                result = op_walk(operation[1], scope, operation[3], frozenset(operation[4]),
                                 min(stop, time.monotonic() + operation[5]))
            elif name == "p":
                result = os.path.realpath(operation[1])
            elif name == "e":
                bootstrap = sys.modules.get("_frozen_importlib_external")
                result = (sys.executable, os.path.realpath(sys.executable), os.environ.get("PATH", ""),
                          list(sys.version_info[:3]), getattr(bootstrap, "MAGIC_NUMBER", b""))
            else:
                result = _UNSUPPORTED
        except Exception:  # noqa: BLE001 - one operation fails, the rest are answered
            result = _FAILED
        cost = _size(result)
        if cost > budget:
            result = _TOO_BIG
            cost = _size(result)
        budget -= cost
        answers.append(result)
    return answers


def main(argv):
    if len(argv) < 3 or argv[1] != MAGIC:
        os.write(2, b"guardrail probe: bad request\n")
        return 2
    request = marshal.loads(bytes.fromhex("".join(argv[2:])))
    out = [MAGIC + " "]
    _encode(answer(request), out)
    out.append("\n")
    data = "".join(out).encode("ascii")
    while data:
        data = data[os.write(1, data):]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
