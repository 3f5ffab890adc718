from __future__ import annotations

from pathlib import Path

from perfguard.measure.memory import ProcessRss


def test_process_rss_resets_and_reads_vm_hwm(tmp_path: Path) -> None:
    (tmp_path / "clear_refs").write_text("")
    (tmp_path / "status").write_text("Name:\tpython\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n")
    probe = ProcessRss(tmp_path)
    probe.start()
    assert (tmp_path / "clear_refs").read_text() == "5"
    reading = probe.stop()
    assert reading.peak_bytes == 2048 * 1024
    assert reading.start_bytes == 1024 * 1024
    assert "VmHWM" in reading.method


def test_process_rss_falls_back_where_proc_is_missing(tmp_path: Path) -> None:
    probe = ProcessRss(tmp_path / "absent")
    probe.start()
    reading = probe.stop()
    assert reading.peak_bytes > 0
    assert "not resettable" in reading.method


def test_real_process_peak_is_positive() -> None:
    probe = ProcessRss()
    probe.start()
    block = bytearray(64 * 1024 * 1024)
    block[::4096] = b"x" * len(block[::4096])
    reading = probe.stop()
    assert reading.peak_bytes >= 64 * 1024 * 1024
