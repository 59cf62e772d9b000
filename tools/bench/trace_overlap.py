#!/usr/bin/env python3
"""How much of a streamed run's weight uploads overlapped compute.

Reads a trace written by `kerasc run|bench --trace FILE` (Chrome trace
JSON: one process per device, thread 0 = compute lane, thread 1 = copy
lane) and prints, per device with a copy lane:

  uploads N, early E: uploads that began before the compute running at
                      that moment ended (prefetched while the previous
                      layer computed)
  copy_ms, overlapped_ms, overlap%: upload time spent while the same
                      device's compute lane was busy
  compute_ms, idle_ms: compute lane busy time, and the gaps inside the
                      run's span where compute waited (e.g. on an upload)
  enqueue_ms:         host time spent enqueueing the device's layers
                      (close to compute_ms: the run is launch-bound)

Usage: trace_overlap.py TRACE.json
"""
import json
import sys


def merged(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def covered(start, end, busy):
    """Length of [start, end) inside the merged intervals busy."""
    total = 0.0
    for b0, b1 in busy:
        if b1 <= start:
            continue
        if b0 >= end:
            break
        total += min(end, b1) - max(start, b0)
    return total


def inside(t, busy):
    return any(b0 < t < b1 for b0, b1 in busy)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: trace_overlap.py TRACE.json")
    try:
        with open(sys.argv[1]) as f:
            trace = json.load(f)
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        sys.exit(f"trace_overlap: {sys.argv[1]}: not a kerasc trace ({err})")
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    found = False
    for pid in sorted({e["pid"] for e in events}):
        compute = [(e["ts"], e["ts"] + e["dur"]) for e in events
                   if e["pid"] == pid and e.get("cat") == "compute"]
        copies = [(e["ts"], e["ts"] + e["dur"]) for e in events
                  if e["pid"] == pid and e.get("cat") == "copy"]
        enqueue_us = sum(e["dur"] for e in events
                         if e["pid"] == pid and e.get("cat") == "enqueue")
        if not copies:
            continue
        found = True
        busy = merged(compute)
        copy_us = sum(b - a for a, b in copies)
        overlap_us = sum(covered(a, b, busy) for a, b in copies)
        early = sum(1 for a, _ in copies if inside(a, busy))
        compute_us = sum(b - a for a, b in busy)
        span = (busy[0][0], busy[-1][1]) if busy else (0, 0)
        idle_us = (span[1] - span[0]) - compute_us
        pct = 100.0 * overlap_us / copy_us if copy_us > 0 else 0.0
        print(f"{names.get(pid, pid)}: uploads {len(copies)}, early {early}; "
              f"copy_ms {copy_us / 1e3:.3f}, overlapped_ms {overlap_us / 1e3:.3f} "
              f"({pct:.0f}%); compute_ms {compute_us / 1e3:.3f}, idle_ms {idle_us / 1e3:.3f}; "
              f"enqueue_ms {enqueue_us / 1e3:.3f}")
    if not found:
        print("no device streamed weights in this trace (everything resident)")


if __name__ == "__main__":
    main()
