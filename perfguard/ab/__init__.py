"""Same-job A/B: the base revision and the working tree measured side by side.

`worktree` checks the base revision out next to the repository; `driver` (in the pytest
session) runs one worker process per tree and alternates their measurement blocks;
`worker` is the other end, inside each worker's pytest session; `channel` is the wire.
"""
