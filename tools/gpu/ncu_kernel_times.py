"""Per-kernel GPU times from an Nsight Compute CSV of gpu__time_duration.sum (tools/gpu/ncu_kernel_times.sh writes
one): the kernels by total time, then every launch in order (index, us, grid, block, name), so one layer's kernels can
be read between two launches of a kernel that opens it (e.g. the MLA prefill kernel).

usage: python3 ncu_kernel_times.py NCU_CSV [TOP]
"""
import collections
import csv
import io
import sys


def launches(path):
    """[(name, us, grid, block)] in launch order; ncu's log lines before the CSV header are skipped."""
    lines = open(path).read().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = csv.DictReader(io.StringIO("\n".join(lines[header:])))
    out = []
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0]
        out.append((name, float(row["Metric Value"].replace(",", "")) / 1e3, row["Grid Size"], row["Block Size"]))
    return out


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    seq = launches(sys.argv[1])
    total = collections.defaultdict(float)
    count = collections.Counter()
    for name, us, _, _ in seq:
        total[name] += us
        count[name] += 1
    print(f"{len(seq)} launches, {sum(total.values()):.1f} us in all")
    print(f"{'total_us':>10} {'launches':>8}  kernel")
    for name, us in sorted(total.items(), key=lambda item: -item[1])[:top]:
        print(f"{us:10.1f} {count[name]:8d}  {name[:110]}")
    print()
    print(f"{'index':>5} {'us':>9}  {'grid':<14} {'block':<12} kernel")
    for index, (name, us, grid, block) in enumerate(seq):
        print(f"{index:5d} {us:9.1f}  {grid:<14} {block:<12} {name[:90]}")


if __name__ == "__main__":
    main()
