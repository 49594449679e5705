"""Recipe: a Celery task that runs on one worker at a time, under a named lock.

Celery may start a job twice at once: beat fires on two schedulers, a task is retried
while its first run still goes, or two users press the same button. The job below is a
function decorated by :meth:`~docmultilock.NamedLocks.holding`: each call holds the job's
name in :class:`~docmultilock.NamedLocks` while it runs, and a call that finds the name
held raises :class:`~docmultilock.LockAlreadyTaken` without running, so the task skips at
once, whichever worker or machine it is on:

* ``locks.holding(JOB, keepalive=True, ...)``: the process's keep-alive thread extends the
  lock while the job runs, so a job may outlast ``lock_timeout``; a worker that dies (or
  is killed by Celery's hard time limit) frees the name when its last extension runs out.
* ``on_lost=``: called from the keep-alive as soon as the lock is found lost (an extension
  failed, or an operator broke it); the job checks ``held.lost`` between steps and stops
  (``pass_held=True`` hands it the held lock). The call then raises the loss, and Celery
  records the task as failed.
* Each step's write is fenced by ``held.lock.fence``, which grows with every grant of the
  name: a run that stalled past its lock cannot overwrite a newer run's report.

Here the app uses the in-memory broker and ``task_always_eager=True``: ``delay()`` runs the
task in the calling thread, so the script needs no broker and no worker. The two "workers"
are threads. In production, drop both settings and point ``broker`` at yours.

Run it as a script. Its last run has its lock broken on purpose: the loss is logged, and
Celery logs the failed task with a traceback, on stderr; the script says so before. It
uses the MongoDB named by DOCMULTILOCK_MONGODB_URI, or starts an
embedded server when that is unset. It needs Celery, which the ``celery`` extra installs;
from a clone of the repository::

    pip install -e '.[celery,embedded]'
    python examples/recipe_celery.py
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

# Celery ships no type hints (they are in the separate celery-types): its names are Any here.
from celery import Celery  # type: ignore[import-untyped]
from pymongo import MongoClient
from pymongo.database import Database

from docmultilock import HeldLock, Lock, LockAlreadyTaken, LockError, NamedLocks
from docmultilock.testing import mongodb_uri

log = logging.getLogger(__name__)

JOB = "nightly-report"

app = Celery("recipe_celery", broker="memory://localhost/")
app.conf.update(
    task_always_eager=True,  # delay() runs the task here, in the calling thread
    task_eager_propagates=False,  # a failed task's error is kept in its result, as a worker would
)


def alert(lock: Lock, error: LockError) -> None:
    """Called once, from the keep-alive thread, as soon as the loss is known: keep it short.

    The job itself sees ``held.lost`` and stops at its next step.
    """
    log.error("the run holding %s lost its lock (fence %d): %s", JOB, lock.fence, error)


class Jobs:
    """The job's database and its named locks, made once per worker process."""

    def __init__(
        self, db: Database[dict[str, Any]], *, lock_timeout: float, step_seconds: float
    ) -> None:
        self.db = db
        # The names' lock documents live in "docmultilock.locks" of the app's database.
        self.locks = NamedLocks(db, lock_timeout=lock_timeout)
        self.step_seconds = step_seconds
        # One run at a time: each call holds JOB while it runs, kept alive; a call that
        # finds JOB held raises LockAlreadyTaken and does not run.
        self.report = self.locks.holding(JOB, keepalive=True, on_lost=alert, pass_held=True)(
            self._report
        )

    def _report(self, held: HeldLock, steps: int) -> dict[str, Any]:
        """Run the report in ``steps`` steps, holding ``JOB`` (``held``)."""
        started = time.monotonic()
        done = 0
        for step in range(1, steps + 1):
            time.sleep(self.step_seconds)  # the real work of one step
            if held.lost.is_set():
                break  # write nothing more: another run may have the name by now
            fence = held.lock.fence
            # Fenced besides: lands only if no newer run (a larger fence) has written since.
            self.db.reports.update_one(
                {"_id": JOB, "fence": {"$lte": fence}}, {"$set": {"fence": fence, "step": step}}
            )
            done = step
        # Returning releases the name; after a loss the call raises the loss instead.
        return {"skipped": False, "steps": done, "seconds": time.monotonic() - started}


_jobs: Jobs | None = None


def use_database(
    db: Database[dict[str, Any]], *, lock_timeout: float = 60.0, step_seconds: float = 1.0
) -> None:
    """Run the jobs on ``db``: at worker start-up, after the fork (``worker_process_init``)."""
    global _jobs  # the process's one set of managers
    _jobs = Jobs(db, lock_timeout=lock_timeout, step_seconds=step_seconds)


def jobs() -> Jobs:
    if _jobs is None:
        raise RuntimeError("call use_database(db) at worker start-up")
    return _jobs


def nightly_report(task: Any, steps: int = 3) -> dict[str, Any]:
    """Run the nightly report in ``steps`` steps, unless another run holds the job's name.

    ``task`` is Celery's task (``bind=True``), for the id of this run.
    """
    try:
        return jobs().report(steps)
    except LockAlreadyTaken:
        log.info("run %s skipped: another run holds %s", task.request.id, JOB)
        return {"skipped": True}


# Registered without the decorator form, so that mypy keeps the function's own types.
nightly_report_task = app.task(bind=True, name="recipe.nightly_report")(nightly_report)


def run_in_thread(steps: int) -> tuple[threading.Thread, list[Any]]:
    """Start the task on a thread, as another worker would; its result lands in the list."""
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(nightly_report_task.delay(steps)))
    worker.start()
    return worker, results


def wait_until_held(locks: NamedLocks) -> None:
    deadline = time.monotonic() + 30.0
    while not locks.locked(JOB):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{JOB} was never taken")
        time.sleep(0.02)


def main() -> None:
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")  # on stderr
    with mongodb_uri() as uri:
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        db = client[f"docmultilock_example_{uuid.uuid4().hex[:8]}"]
        try:
            db.reports.insert_one({"_id": JOB, "fence": 0, "step": 0})
            # Steps of 0.8 s under a 1.5 s lifetime: the job outlives the lock's lifetime
            # only because the keep-alive extends it.
            use_database(db, lock_timeout=1.5, step_seconds=0.8)
            locks = jobs().locks

            worker, results = run_in_thread(steps=3)
            wait_until_held(locks)
            second = nightly_report_task.delay(3)  # a second run while the first holds it
            # An eager result is complete when delay() returns: read it, no get() needed
            # (Celery refuses get() while a task runs in the process, as the first one does).
            print(f"second run, while the first holds {JOB}: {second.result}")
            worker.join()
            first = results[0].result
            print(f"first run: {first['steps']} steps, {first['seconds']:.1f} s under a 1.5 s lock")
            print(f"report after it: step {(db.reports.find_one({'_id': JOB}) or {})['step']}")

            # An operator breaks the lock of a run in progress: it stops at its next step.
            print(
                "breaking the lock of a run in progress: expect its loss logged, then "
                "Celery's traceback of the failed task, on stderr",
                flush=True,
            )
            worker, results = run_in_thread(steps=5)
            wait_until_held(locks)
            locks.break_lock(JOB, everyone=True)
            worker.join()
            broken = results[0]
            error = type(broken.result).__name__
            print(f"run whose lock was broken: failed={broken.failed()}, {error}")
        finally:
            client.drop_database(db.name)
            client.close()


if __name__ == "__main__":
    main()
