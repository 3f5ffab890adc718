"""Processes on this machine, from Linux's /proc: a process's descendants, and which pids
this PID namespace can see. Elsewhere, the answers that assume nothing."""

from __future__ import annotations

from pathlib import Path


def process_tree(root: int, proc: Path = Path("/proc")) -> set[int]:
    """`root` and every process descended from it (Linux /proc; just `root` elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            ppid = int(stat.read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    tree, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


def in_this_namespace(pid: int) -> bool:
    """Whether this PID namespace sees `pid` (a container sees not all of the host's)."""
    return Path(f"/proc/{pid}").exists() if Path("/proc/self").exists() else True
