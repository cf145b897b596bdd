"""A node's query-vector cache, shared by all its processes (docs/operations.md#embedders).

`serve` runs several web processes; each keeps its own small LRU of single-text vectors
(memories/embedding_batch.py `VectorCache`), so without this one the same search query would be
embedded once per process. `SharedVectorCache` is a file of fixed size, memory-mapped by every
process of the node: a header, then `slots` slots, each

    check (16 bytes) | key (16 bytes) | vector (dim float32)

`key` is a digest of the model's name and the text (the model's precision is in its name: an
8-bit vector is never served for the full-precision model); `check` is a digest of the key and
the vector. A text has one slot, picked by its key; a new text takes it over (eviction by
overwrite). A writer takes the slot's `fcntl` byte-range lock, without waiting (a busy slot is
not written: the next miss writes it); a reader takes no lock and keeps a slot only if its key is
the one asked for and its check matches: a slot being rewritten, or damaged, is a miss, never
someone else's vector.

The file lies in `/dev/shm` where there is one (memory, never the disk), else in the temp
directory, named after the database and the model (`default_path`); it is created with mode
0600, and one not owned by this user, or open to others, is refused. The first process creates
it at its size (reserved at once, so that a full `/dev/shm` refuses it then rather than kill a
process that writes a slot later); later processes take the size they find. A file that cannot
be used leaves the cache off in that process, with a warning: the cache only ever saves passes.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import mmap
import os
import stat
import struct
import tempfile
import threading
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# The layout's version is in the file's name too: another layout is another file.
MAGIC = b"MHVEC\x00\x01\x00"
HEADER = struct.Struct("<8sII")  # magic, dim, slots
HEADER_SIZE = 64
DIGEST_SIZE = 16
FLOAT = "f"  # float32, in the machine's byte order (the file never leaves the machine)


def default_path(database: Mapping[str, Any], model: str) -> Path:
    """`/dev/shm` (else the temp directory) / a name of the database's address and the model."""
    address = "\0".join(str(database.get(part) or "") for part in ("HOST", "PORT", "NAME"))
    name = hashlib.blake2b(f"{address}\0{model}".encode(), digest_size=8).hexdigest()
    shm = Path("/dev/shm")
    directory = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    return directory / f"memoryhub-vectors-v1-{name}.bin"


def text_key(model: str, text: str) -> bytes:
    """A text's key under a model (a model's name holds no NUL: the pair is unambiguous)."""
    data = model.encode() + b"\0" + text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=DIGEST_SIZE).digest()


def _check(key_and_vector: bytes | memoryview) -> bytes:
    return hashlib.blake2b(key_and_vector, digest_size=DIGEST_SIZE).digest()


class SharedVectorCache:
    """`open()` one; `get(model, text)` and `put(model, text, vector)` from any thread or
    process of the node."""

    def __init__(self, fd: int, mapped: mmap.mmap, *, dim: int, slots: int, path: Path):
        self._fd = fd
        self._map = mapped
        self.dim = dim
        self.slots = slots
        self.path = path
        self.slot_size = 2 * DIGEST_SIZE + 4 * dim
        # fcntl's locks are a process's, not a thread's: threads take turns here first.
        self._write_lock = threading.Lock()
        self.hits = self.misses = self.busy = 0  # this process's (diagnostics and tests)

    @classmethod
    def open(cls, path: Path, *, slots: int, dim: int) -> SharedVectorCache | None:
        """The cache in the file at `path` (created at `slots` slots if missing); None, with a
        warning, where that file cannot be used."""
        try:
            return cls._open(path, slots=slots, dim=dim)
        except (OSError, ValueError) as exc:
            logger.warning("the shared query-vector cache at %s is off: %s", path, exc)
            return None

    @classmethod
    def _open(cls, path: Path, *, slots: int, dim: int) -> SharedVectorCache:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                raise ValueError("not a file of this user")
            if info.st_mode & 0o077:
                raise ValueError("open to other users (it must be mode 0600)")
            # One process at a time sets the file up; the others wait here (start-up only).
            fcntl.lockf(fd, fcntl.LOCK_EX, HEADER_SIZE, 0)
            try:
                dim, slots = cls._header(fd, slots=slots, dim=dim)
            finally:
                fcntl.lockf(fd, fcntl.LOCK_UN, HEADER_SIZE, 0)
            size = HEADER_SIZE + slots * (2 * DIGEST_SIZE + 4 * dim)
            mapped = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, mapped, dim=dim, slots=slots, path=path)

    @staticmethod
    def _header(fd: int, *, slots: int, dim: int) -> tuple[int, int]:
        """The file's (dim, slots), after writing its header if it is new."""
        raw = os.pread(fd, HEADER.size, 0)
        if not raw:
            size = HEADER_SIZE + slots * (2 * DIGEST_SIZE + 4 * dim)
            try:
                os.posix_fallocate(fd, 0, size)  # every page now: no SIGBUS on a full tmpfs later
            except OSError as exc:
                os.ftruncate(fd, 0)
                if exc.errno == errno.ENOSPC:
                    raise ValueError(f"no room for {size} bytes") from exc
                raise
            os.pwrite(fd, HEADER.pack(MAGIC, dim, slots), 0)
            return dim, slots
        if len(raw) < HEADER.size:
            raise ValueError("its header is cut short")
        magic, found_dim, found_slots = HEADER.unpack(raw)
        if magic != MAGIC or found_dim != dim or found_slots <= 0:
            raise ValueError("not a vector cache of this version and dimension")
        needed = HEADER_SIZE + found_slots * (2 * DIGEST_SIZE + 4 * dim)
        if os.fstat(fd).st_size < needed:
            raise ValueError("shorter than its header says")
        return dim, found_slots

    def _offset(self, key: bytes) -> int:
        return HEADER_SIZE + int.from_bytes(key[:8], "little") % self.slots * self.slot_size

    def get(self, model: str, text: str) -> list[float] | None:
        key = text_key(model, text)
        offset = self._offset(key)
        raw = self._map[offset : offset + self.slot_size]  # one copy: checked, then read
        if (
            raw[DIGEST_SIZE : 2 * DIGEST_SIZE] != key
            or _check(raw[DIGEST_SIZE:]) != raw[:DIGEST_SIZE]
        ):
            self.misses += 1
            return None
        self.hits += 1
        vector = array(FLOAT)
        vector.frombytes(raw[2 * DIGEST_SIZE :])
        return vector.tolist()  # type: ignore[return-value]  # an array of "f" holds floats

    def put(self, model: str, text: str, vector: list[float]) -> None:
        if len(vector) != self.dim:
            return
        key = text_key(model, text)
        body = key + array(FLOAT, vector).tobytes()
        slot = _check(body) + body
        offset = self._offset(key)
        with self._write_lock:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB, self.slot_size, offset)
            except OSError:
                self.busy += 1  # another process writes this slot now: never wait for it
                return
            try:
                self._map[offset : offset + self.slot_size] = slot
            finally:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, self.slot_size, offset)

    def close(self) -> None:
        self._map.close()
        os.close(self._fd)
