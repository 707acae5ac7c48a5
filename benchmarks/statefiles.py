"""State directories full of thread files, in the adapter's own record format."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from aguiadapter.threads.record import RunEntry, ThreadRecord, record_to_json
from aguiadapter.store.file.store import thread_file_name


def sample_record(index: int, cwd: str) -> ThreadRecord:
    """A plausible idle thread: bound, with a session, a finished task and a few runs."""
    record = ThreadRecord(
        thread_id=f"bench-stored-{index:07d}",
        context_id=f"ctx-{uuid.uuid4()}",
        cwd=cwd,
        session_id=str(uuid.uuid4()),
        execution_id=f"exec-{uuid.uuid4()}",
        ros_invocation_id="inv-1",
        task_id=str(uuid.uuid4()),
        last_user_message_id=f"msg-{index}-3",
        updated_at=time.time(),
        version=7,
    )
    for run in range(3):
        record.runs[f"run-{index}-{run}"] = RunEntry(uuid.uuid4().hex + uuid.uuid4().hex, "success")
    return record


def make_state_dir(root: Path, count: int, cwd: str) -> Path:
    """``root`` holding ``threads/`` with *count* files; reused when already complete."""
    threads = root / "threads"
    done = root / f".complete-{count}"
    if done.exists():
        return root
    threads.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    os.chmod(threads, 0o700)
    for index in range(count):
        record = sample_record(index, cwd)
        path = threads / thread_file_name(record.thread_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, record_to_json(record))
        finally:
            os.close(fd)
    done.write_text("")
    return root


def count_files(root: Path) -> int:
    """How many thread files a state dir holds."""
    threads = root / "threads"
    return sum(1 for _ in os.scandir(threads)) if threads.exists() else 0
