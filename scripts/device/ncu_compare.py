#!/usr/bin/env python3
"""Nsight Compute profiles side by side: one column per `--page details --csv` export (as
`run.sh ncu-forward` writes them, ours and PyTorch's SDPA-flash), one row per metric of the
sections that say where a kernel's time goes (launch, occupancy, issue, memory, instruction
mix); with the `--page raw --csv` exports beside them (NAME=DETAILS_CSV,RAW_CSV), the warp
stall reasons too (cycles per issued instruction, by reason). Runs anywhere (no GPU): python3
only.

usage: ncu_compare.py OUT_CSV NAME=DETAILS_CSV[,RAW_CSV]...
"""
import csv
import re
import sys

# The sections whose metrics are compared (all of their metrics, in the export's order).
SECTIONS = (
    "GPU Speed Of Light Throughput",
    "Launch Statistics",
    "Occupancy",
    "Scheduler Statistics",
    "Warp State Statistics",
    "Compute Workload Analysis",
    "Memory Workload Analysis",
    "Instruction Statistics",
    "Warp stalls",
)
# Raw metrics of the "Warp stalls" rows: warps stalled per issued instruction, by reason.
STALL = re.compile(r"^smsp__average_warps_issue_stalled_(.+)_per_issue_active\.ratio$")


def metrics(path):
    """{(section, metric, unit): value} of the first kernel in a details export."""
    values = {}
    with open(path, newline="") as f:
        rows = csv.reader(f)
        header = None
        for row in rows:
            if header is None:
                if "Metric Name" in row:
                    header = {name: i for i, name in enumerate(row)}
                continue
            if len(row) <= header["Metric Value"] or not row[header["Metric Name"]]:
                continue
            key = (row[header["Section Name"]], row[header["Metric Name"]],
                   row[header["Metric Unit"]])
            values.setdefault(key, row[header["Metric Value"]])
    return values


def stalls(path):
    """{("Warp stalls", reason, unit): value} of the first kernel in a raw export (its first
    row names the metrics, its second their units, the next ones are kernels)."""
    with open(path, newline="") as f:
        rows = [row for row in csv.reader(f) if row]
    start = next(i for i, row in enumerate(rows) if "ID" in row)
    names, units, first = rows[start], rows[start + 1], rows[start + 2]
    values = {}
    for i, name in enumerate(names):
        match = STALL.match(name)
        if match and i < len(first):
            values[("Warp stalls", match.group(1), units[i])] = first[i]
    return values


def profile(paths):
    """The metrics of one column: a details export, and a raw one's stall reasons."""
    details, *raw = paths.split(",")
    values = metrics(details)
    for path in raw:
        values.update(stalls(path))
    return values


def main(out, named):
    columns = [(name, profile(paths)) for name, paths in (n.split("=", 1) for n in named)]
    keys = []
    for _, values in columns:
        for key in values:
            if key[0] in SECTIONS and key not in keys:
                keys.append(key)
    keys.sort(key=lambda k: SECTIONS.index(k[0]))
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["section", "metric", "unit"] + [name for name, _ in columns])
        for key in keys:
            writer.writerow(list(key) + [values.get(key, "") for _, values in columns])
    print(f"{len(keys)} metrics of {len(columns)} profiles -> {out}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
