"""Same-job A/B (`--perfguard-ab`): the base revision and the working tree measured side by
side, all of it here.

- `protocol`: every message between the driver and a worker, declared once;
- `channel`: the wire (a local socket);
- `session`: the driving session's part: the base's worktree (`perfguard.worktree`), the
  driver, the base's result of each item;
- `driver`: runs one worker process per tree and alternates their measurement blocks;
- `side`: one tree's worker process, started, restarted after a crash, stopped;
- `worker`: the other end, inside each worker's pytest session.

The two plugin roles (`AbDriving` in `ab/roles.py`, `AbWorker` in `ab/worker.py`) call into
these; the paired statistics are `perfguard.stats` (`significance`, `sequential`), and the
re-measure of a flag beside the base commit is the confirmation's (`perfguard.confirm`).
"""
