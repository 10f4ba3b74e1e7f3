"""The state folder's record database as tests reach into it (``shell/store.py`` owns it):
a record's row written raw (to damage it, as a bad disk or a hand edit would) and the
transaction number a row was last written in."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tfdeclare.shell.store import DATABASE


def put_row(state_dir: Path, name: str, data: str | bytes) -> None:
    """The job's row holds ``data`` now, whatever it is (committed, as a writer would)."""
    with sqlite3.connect(state_dir / DATABASE) as connection:
        seq = connection.execute("SELECT value FROM meta WHERE key = 'seq'").fetchone()[0] + 1
        connection.execute("UPDATE meta SET value = ? WHERE key = 'seq'", (seq,))
        connection.execute(
            "INSERT OR REPLACE INTO records (name, seq, data) VALUES (?, ?, ?)", (name, seq, data)
        )
    connection.close()


def seq_of(state_dir: Path, name: str) -> int | None:
    """The transaction the job's row was last written in; None without one."""
    connection = sqlite3.connect(f"file:{state_dir / DATABASE}?mode=ro", uri=True)
    try:
        row = connection.execute("SELECT seq FROM records WHERE name = ?", (name,)).fetchone()
    finally:
        connection.close()
    return None if row is None else int(row[0])


def delete_row(state_dir: Path, name: str) -> None:
    """The job's row gone (committed)."""
    with sqlite3.connect(state_dir / DATABASE) as connection:
        connection.execute("DELETE FROM records WHERE name = ?", (name,))
    connection.close()
