"""The state folder: job records (one SQLite file for all, written in transactions) and where
the backends keep their own state. Reading needs no lock; writing is for the lock holder.

Layout::

    <state-dir>/lock                   the controller lock (shell.lock)
    <state-dir>/records.sqlite         every JobRecord, one row a job (and its -journal)
    <state-dir>/jobs/<name>.json       records as releases before it kept them (adopted, below)
    <state-dir>/status-summaries.json  the status files' summaries (shell.statuswriter: a cache)
    <state-dir>/local/...              the local backend's task folders
    <state-dir>/mesos/...              the Mesos backend's framework id and task journal

**One file, not a file a job.** An ``apply`` of 10,000 jobs created 10,000 record files, each
a new inode renamed into place; on an ext4 here that was 0.15-0.5 ms of kernel time a file,
more than the rest of writing a record (docs/benchmarks.md, "At the policy's own limits").
Records now go to ``records.sqlite`` (Python's own ``sqlite3``): table ``records`` (``name``,
``seq``, ``data``: the record's JSON as before, readable with the ``sqlite3`` shell), a batch
in one transaction. Rollback journal (``TRUNCATE``: the journal file is made once, not a
commit) and ``synchronous=FULL``: a commit returns once the database is on disk, so a record
the controller saved before launching a job's tasks is there after a power loss too; a process
killed mid-transaction leaves a journal that the next opener, reader or writer, rolls back to
the last commit (SQLite's own recovery). Not the write-ahead log: its readers must make a
``-shm`` file, which a full disk refuses, and ``tfdeclare status`` must work on a full disk.
``seq`` grows with every transaction (table ``meta``), so a reader parses again only the rows
written since it last read them.

The file is made 0600 before SQLite opens it (its journal takes that mode): a spec's
environment may hold secrets. For the same reason a deleted or replaced row's bytes are
overwritten with zeros (``secure_delete``), and the file gives its space back once deleted
jobs' pages are most of it (``VACUUM`` after a deletion, within one transaction, its copy in
memory, never in a temporary file: ``_shrink``); on a full disk it stays as large, nothing
lost. A reader takes no lock of ours (``tfdeclare status``); SQLite's
own file locks make each read one committed state (a reader waits out a commit, a commit
waits for the reads under way: each a few milliseconds). A file that is not such a database,
or cannot be opened, is a ``StateError`` naming it (``StoreUnreadable``); a row whose JSON is
not a record is that job's alone (``unreadable``), as a damaged record file was.

**Adopting an older state folder.** Records in ``jobs/<name>.json`` are read as before, a row
of the same name winning over its file. The lock holder's first write of a store (and any
later write that finds such files again) first copies every readable one into the database
in a transaction of its own, then removes the files it copied (and those a row shadows), then
the folder once empty. A crash between leaves rows and files saying the same (rows win); an
unreadable file is left where it is and reported, never dropped. So an upgrade never loses or
runs a job again.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import stat
import threading
import urllib.parse
from collections.abc import Iterable, Sequence
from pathlib import Path

from tfdeclare.core.plan.observed import ObservedJob, observed_job
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.spec.names import is_job_name
from tfdeclare.files import fsync_dir, read_regular

DATABASE = "records.sqlite"
RECORD_MAX_BYTES = 256 << 20  # an older release's record file (a 100,000-task job's: ~20 MB)
SHRINK_MIN_PAGES = 256  # 1 MiB of 4 KiB pages: smaller files are not worth rewriting
LEGACY_DIR = "jobs"
_SCHEMA = (
    "BEGIN IMMEDIATE;"
    "CREATE TABLE IF NOT EXISTS records (name TEXT PRIMARY KEY, seq INTEGER NOT NULL, data BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
    "INSERT OR IGNORE INTO meta VALUES ('format', 1), ('seq', 0);"
    "COMMIT;"
)
_FORMAT = 1

# json.dumps with options makes an encoder a call; the same settings, made once
_RECORD_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode

# SQLite's primary result codes, as the errno a person reads (``files.failed_write``)
_ERRNO = {
    13: errno.ENOSPC,  # SQLITE_FULL
    8: errno.EROFS,  # SQLITE_READONLY
    3: errno.EACCES,  # SQLITE_PERM
    23: errno.EACCES,  # SQLITE_AUTH
    14: errno.EACCES,  # SQLITE_CANTOPEN
    5: errno.EBUSY,  # SQLITE_BUSY
    6: errno.EBUSY,  # SQLITE_LOCKED
    11: errno.EIO,  # SQLITE_CORRUPT
    26: errno.EIO,  # SQLITE_NOTADB
}


class StateError(Exception):
    """The state folder holds something we cannot read (named, with the file)."""


class StoreUnreadable(StateError):
    """The record database as a whole cannot be read (not one job's record): named."""


def _as_os_error(err: sqlite3.Error, path: Path) -> OSError:
    """A failed write of the database as an ``OSError`` naming it (what every layer above says
    about a file it could not write)."""
    code = getattr(err, "sqlite_errorcode", None)
    number = _ERRNO.get(code & 0xFF, errno.EIO) if isinstance(code, int) else errno.EIO
    if number == errno.EROFS and not os.access(path.parent, os.W_OK):
        number = errno.EACCES
    return OSError(number, os.strerror(number), str(path))


class StateStore:
    """Job records. With ``exclusive=True`` (the lock holder, the only writer) records read
    once are trusted until this store itself saves or deletes them; otherwise every read
    looks at each row's ``seq`` (and each old record file's stat)."""

    def __init__(self, root: Path, *, exclusive: bool = False) -> None:
        self.exclusive = exclusive
        self._all_read = False
        self.root = root
        self.database = root / DATABASE
        self.jobs_dir = root / LEGACY_DIR  # records of older releases, adopted (module docstring)
        # Parsed records by name, with what they were read at (a row's seq, or a file's stat):
        # a pass over a thousand unchanged jobs does not parse them again.
        self._cache: dict[str, tuple[object, JobRecord]] = {}
        self._observed: dict[str, tuple[JobRecord, ObservedJob]] = {}
        self.unreadable: dict[str, str] = {}
        self._connection: sqlite3.Connection | None = None
        self._writable = False
        self._formatted = False  # the schema seen (it never goes away)
        self._guard = threading.RLock()  # one connection, whichever thread asks

    # ---- the database ------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether any record was ever kept here (the database, or an older release's folder)."""
        return self.database.is_file() or self.jobs_dir.is_dir()

    def _reader(self) -> sqlite3.Connection | None:
        """A connection to read with; None when there is no database (yet), or only the
        empty file a first writer makes before its schema (killed there, or not there yet)."""
        if self._connection is not None:
            if self._formatted:
                return self._connection
            try:
                return self._connection if self._check_format(self._connection) else None
            except sqlite3.Error as err:
                raise StoreUnreadable(f"{self.database}: cannot read the job records: {err}") from err
        if not self.database.exists():
            return None
        self._plain_files()
        # read-write but never created (a hot journal left by a killed writer is rolled back
        # by whoever reads first: SQLite's own recovery); read-only where it cannot be written
        mode = "rw" if os.access(self.database, os.W_OK) else "ro"
        uri = f"file:{urllib.parse.quote(os.fspath(self.database))}?mode={mode}"
        try:
            connection = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            connection.execute("PRAGMA busy_timeout = 10000")
            self._connection = connection
            return connection if self._check_format(connection) else None
        except sqlite3.Error as err:
            raise StoreUnreadable(f"{self.database}: cannot read the job records: {err}") from err

    def _plain_files(self) -> None:
        """``StoreUnreadable`` unless the database and its journal (where there is one) are
        regular files: SQLite opens both by name, following links and waiting on a FIFO, so
        one planted there is refused before it is opened (docs/security.md, "The state
        folder": no one else can plant one in a folder that passes the check)."""
        for path in (self.database, self.database.with_name(DATABASE + "-journal")):
            try:
                found = os.lstat(path)
            except FileNotFoundError:
                continue
            except OSError as err:
                raise StoreUnreadable(f"{path}: cannot read the job records: {err.strerror}") from None
            if not stat.S_ISREG(found.st_mode):
                what = "a link, not followed" if stat.S_ISLNK(found.st_mode) else "not a regular file"
                raise StoreUnreadable(f"{path}: cannot read the job records: {what}")

    def _check_format(self, connection: sqlite3.Connection) -> bool:
        """Whether the database holds our schema (False: no table yet, an empty store);
        ``StoreUnreadable`` for another database or format."""
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return False
        if not {"records", "meta"} <= tables:
            raise StoreUnreadable(
                f"{self.database}: not a tfdeclare state database (tables {sorted(tables)})"
            )
        row = connection.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
        if row is None or row[0] != _FORMAT:
            raise StoreUnreadable(f"{self.database}: unsupported state database format {row and row[0]!r}")
        self._formatted = True
        return True

    def _writer(self) -> sqlite3.Connection:
        """The connection to write with (the lock holder's): the file made 0600 first, never
        through a link; the schema made when new. ``sqlite3.Error`` when it cannot be."""
        if self._connection is not None and self._writable:
            return self._connection
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self.root.mkdir(parents=True, exist_ok=True)
        self._private_file()
        self._plain_files()
        connection = sqlite3.connect(self.database, isolation_level=None, check_same_thread=False)
        try:
            connection.execute("PRAGMA busy_timeout = 10000")
            connection.execute("PRAGMA journal_mode = TRUNCATE")
            connection.execute("PRAGMA synchronous = FULL")
            connection.execute("PRAGMA secure_delete = ON")  # a deleted job's bytes do not linger
            connection.execute("PRAGMA temp_store = MEMORY")  # VACUUM's copy: never in /tmp
            connection.executescript(_SCHEMA)  # one transaction: all of it or none
            self._check_format(connection)
        except BaseException:
            connection.close()
            raise
        self._connection, self._writable = connection, True
        return connection

    def _private_file(self) -> None:
        """The database file made 0600 (a new one by us, never through a link), or an existing
        one checked to be a plain file and made 0600. An existing one is never opened and
        closed here: closing any descriptor of a file drops every POSIX lock this process holds
        on it, SQLite's included."""
        path = self.database
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            try:
                found = os.lstat(path)
                if stat.S_ISREG(found.st_mode) and stat.S_IMODE(found.st_mode) != 0o600:
                    os.chmod(path, 0o600)
            except OSError as err:
                raise OSError(err.errno, err.strerror, str(path)) from err
            if not stat.S_ISREG(found.st_mode):
                raise OSError(errno.ELOOP, "not a plain file (a link?)", str(path)) from None
            return
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(path)) from err
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._guard:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
                self._writable = False

    def _rows(self, names: Sequence[str] | None = None) -> list[tuple[str, int, bytes]]:
        """(name, seq, data) of every row (or of ``names``), in one read transaction."""
        with self._guard:
            connection = self._reader()
            if connection is None:
                return []
            try:
                if names is None:
                    return connection.execute("SELECT name, seq, data FROM records").fetchall()
                if len(names) == 1:
                    return connection.execute(
                        "SELECT name, seq, data FROM records WHERE name = ?", (names[0],)
                    ).fetchall()
                wanted = set(names)
                rows = connection.execute("SELECT name, seq, data FROM records").fetchall()
                return [row for row in rows if row[0] in wanted]
            except sqlite3.Error as err:
                raise StoreUnreadable(f"{self.database}: cannot read the job records: {err}") from err

    def _parse(self, name: str, data: bytes | str) -> JobRecord:
        where = f"{self.database}: job {name}"
        try:
            parsed = json.loads(data)
        except ValueError as err:
            raise StateError(f"{where}: cannot read job record: {err}") from err
        try:
            return JobRecord.from_json(parsed)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise StateError(f"{where}: invalid job record: {err}") from err

    # ---- older releases' record files -----------------------------------------------------

    def record_path(self, name: str) -> Path:
        """Where a release before the database kept this job's record (adopted from there)."""
        if not is_job_name(name):
            raise StateError(f"{name!r} is not a job name")
        return self.jobs_dir / f"{name}.json"

    def _load_file(self, name: str) -> JobRecord | None:
        path = self.record_path(name)
        try:
            data = json.loads(read_regular(path, RECORD_MAX_BYTES))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            raise StateError(f"{path}: cannot read job record: {err}") from err
        try:
            return JobRecord.from_json(data)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise StateError(f"{path}: invalid job record: {err}") from err

    def _file_names(self) -> list[str]:
        try:
            entries = os.listdir(self.jobs_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [n[:-5] for n in entries if n.endswith(".json") and is_job_name(n[:-5])]

    # ---- reading -------------------------------------------------------------------------------

    def load(self, name: str) -> JobRecord | None:
        if not is_job_name(name):
            raise StateError(f"{name!r} is not a job name")
        rows = self._rows([name])
        if rows:
            return self._parse(name, rows[0][2])
        return self._load_file(name)

    def names(self) -> list[str]:
        """The jobs that have a record (read or not: nothing is parsed)."""
        with self._guard:
            connection = self._reader()
            try:
                rows = connection.execute("SELECT name FROM records").fetchall() if connection else []
            except sqlite3.Error as err:
                raise StoreUnreadable(f"{self.database}: cannot read the job records: {err}") from err
        return sorted({row[0] for row in rows} | set(self._file_names()))

    def records(self) -> dict[str, JobRecord]:
        """Every readable record. Unreadable ones are left out and listed in ``unreadable``
        (name -> why), so one damaged record never stops the others being managed, and the
        controller knows not to treat that job's tasks as orphans. A database that cannot be
        read at all is a ``StateError`` (named)."""
        if self.exclusive and self._all_read:
            return {name: entry[1] for name, entry in self._cache.items()}
        out: dict[str, JobRecord] = {}
        unreadable: dict[str, str] = {}
        for name, seq, data in self._rows():
            if not is_job_name(name):
                continue
            cached = self._cache.get(name)
            if cached is not None and cached[0] == seq:
                out[name] = cached[1]
                continue
            try:
                record = self._parse(name, data)
            except StateError as err:
                unreadable[name] = str(err)
                continue
            self._cache[name] = (seq, record)
            out[name] = record
        self._read_files(out, unreadable)
        for gone in self._cache.keys() - out.keys():
            del self._cache[gone]
        self.unreadable = unreadable
        self._all_read = not unreadable
        return dict(sorted(out.items()))

    def _read_files(self, out: dict[str, JobRecord], unreadable: dict[str, str]) -> None:
        """The older release's record files whose job has no row (rows win)."""
        try:
            entries = list(os.scandir(self.jobs_dir))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            name = entry.name.removesuffix(".json")
            if not entry.name.endswith(".json") or not is_job_name(name) or name in out or name in unreadable:
                continue
            try:
                info = entry.stat()
            except FileNotFoundError:
                continue
            key = ("file", info.st_ino, info.st_mtime_ns, info.st_size)  # atomic writes: a new inode
            cached = self._cache.get(name)
            if cached is not None and cached[0] == key:
                out[name] = cached[1]
                continue
            try:
                record = self._load_file(name)
            except StateError as err:
                unreadable[name] = str(err)
                continue
            if record is not None:
                self._cache[name] = (key, record)
                out[name] = record

    def held(self) -> list[JobRecord] | None:
        """Every record as this store last read or saved it, reading nothing: for the lock
        holder (``exclusive``, the only writer) once it has read them all; None otherwise."""
        if self.exclusive and self._all_read:
            return [entry[1] for entry in self._cache.values()]
        return None

    def observed(self) -> dict[str, ObservedJob]:
        """Per job what the planner compares against; the same object while its record is
        unchanged, so that ``PlanCache`` reuses the plans of unchanged jobs (which a warm
        re-plan needs to meet its target: see there)."""
        out = {}
        for name, record in self.records().items():
            remembered = self._observed.get(name)
            if remembered is None or remembered[0] is not record:
                remembered = (record, observed_job(record))
                self._observed[name] = remembered
            out[name] = remembered[1]
        for gone in self._observed.keys() - out.keys():
            del self._observed[gone]
        return out

    # ---- writing (the lock holder) ------------------------------------------------------------

    @staticmethod
    def _data(record: JobRecord) -> bytes:
        # No indent: json's C encoder (with one it is Python's, about 10x slower).
        return _RECORD_JSON(record.to_json()).encode()

    def _transaction(self, rows: Iterable[tuple[str, bytes]], gone: Iterable[str]) -> int:
        """Write ``rows`` (name, data) and remove ``gone`` in one transaction; its seq."""
        connection = self._writer()
        connection.execute("BEGIN IMMEDIATE")
        try:
            seq = connection.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0] + 1
            connection.execute("UPDATE meta SET value = ? WHERE key = 'seq'", (seq,))
            connection.executemany(
                "INSERT OR REPLACE INTO records (name, seq, data) VALUES (?, ?, ?)",
                ((name, seq, data) for name, data in rows),
            )
            connection.executemany("DELETE FROM records WHERE name = ?", ((name,) for name in gone))
            connection.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            raise
        return int(seq)

    def _adopt_files(self) -> None:
        """The older release's readable record files copied in (module docstring), then
        removed with those a row shadows; the folder too once empty."""
        names = self._file_names()
        if not names:
            with contextlib.suppress(OSError):
                self.jobs_dir.rmdir()  # empty (or not there): nothing to adopt
            return
        connection = self._writer()
        in_rows = {row[0] for row in connection.execute("SELECT name FROM records").fetchall()}
        copied: list[tuple[str, bytes]] = []
        for name in names:
            if name in in_rows:
                continue
            try:
                record = self._load_file(name)
            except StateError:
                continue  # left where it is: reported by records(), never dropped
            if record is not None:
                copied.append((name, self._data(record)))
        if copied:
            self._transaction(copied, ())
        done = {name for name, _ in copied} | (in_rows & set(names))
        for name in done:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.record_path(name))
        with contextlib.suppress(OSError):
            fsync_dir(self.jobs_dir)
        with contextlib.suppress(OSError):
            self.jobs_dir.rmdir()
        for name in done:
            self._cache.pop(name, None)  # read again, from its row
        self._all_read = False

    def _write(self, rows: Sequence[tuple[str, bytes]], gone: Sequence[str]) -> int:
        """One transaction (older files adopted first); an ``OSError`` naming the database."""
        with self._guard:
            try:
                self._adopt_files()
                return self._transaction(rows, gone)
            except sqlite3.Error as err:
                raise _as_os_error(err, self.database) from err
            except StateError as err:
                raise OSError(errno.EIO, str(err), str(self.database)) from err

    def save(self, record: JobRecord) -> None:
        seq = self._write([(record.name, self._data(record))], ())
        self._cache[record.name] = (seq, record)

    def save_many(self, records: Sequence[JobRecord]) -> dict[str, OSError]:
        """``save`` of each, in one transaction; the names of those that could not be saved,
        with why (all of them, or none)."""
        if not records:
            return {}
        try:
            seq = self._write([(r.name, self._data(r)) for r in records], ())
        except OSError as err:
            for record in records:
                self._cache.pop(record.name, None)  # read again: it may be the old one
            self._all_read = False
            return {record.name: err for record in records}
        for record in records:
            self._cache[record.name] = (seq, record)
        return {}

    def _shrink(self) -> None:
        """The file rewritten without its free pages once they are half of it or more (and
        at least ``SHRINK_MIN_PAGES``): deleting 10,000 jobs would otherwise leave the file
        its largest size for good. One transaction: a crash or a full disk leaves it as it was."""
        with self._guard:
            try:
                connection = self._writer()
                free = connection.execute("PRAGMA freelist_count").fetchone()[0]
                pages = connection.execute("PRAGMA page_count").fetchone()[0]
                if free >= SHRINK_MIN_PAGES and 2 * free >= pages:
                    connection.execute("VACUUM")
            except sqlite3.Error:
                pass  # the space stays taken until a later deletion tries again; nothing is lost

    def delete(self, name: str) -> None:
        failed = self.delete_many([name])
        if failed:
            raise failed[name]

    def delete_many(self, names: Sequence[str]) -> dict[str, OSError]:
        """``delete`` of each, in one transaction; those that could not go, with why."""
        if not names:
            return {}
        for name in names:
            if not is_job_name(name):
                raise StateError(f"{name!r} is not a job name")
        try:
            self._write((), names)
        except OSError as err:
            return dict.fromkeys(names, err)
        self._shrink()
        for name in names:
            self._cache.pop(name, None)
            # an older release's file left for it (one that could not be read, so not adopted)
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                os.unlink(self.record_path(name))
        return {}
