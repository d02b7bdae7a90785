#!/usr/bin/env bash
# On the GPU machine: where one kernel's warps wait, by Nsight Compute's PC sampling. Profiles one launch of the
# kernels matching KERNEL_REGEX (the first after SKIP matching launches, default 2: past the warm-up) of BINARY ARGS,
# then prints the kernel's stall reasons (warp samples per reason, largest first) and the SASS instructions with the
# most samples, each with its largest reasons. Clocks are left alone (--clock-control none; METHOD.md).
#   tools/gpu/ncu_stalls.sh KERNEL_REGEX BINARY [ARGS...]     TOP (default 30) instructions; report in $OUT or ./gpu-logs
# HOT=N also lists, in address order, every instruction executed at least N times (a kernel's hot loops as the SASS
# runs them: how cuBLASLt's block-scaled kernel orders its waits, promotions and MMAs was read this way).
# e.g. tools/gpu/ncu_stalls.sh fp8_gemm_grouped_wgmma .carry/variants/base/bench_fp8_gemm_tiled --only prefill \
#        --auto-only --tokens 8192
set -uo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 2 ]; then
  echo "usage: $0 KERNEL_REGEX BINARY [ARGS...]" >&2
  exit 2
fi
kernel_regex=$1
shift
out=${OUT:-gpu-logs}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
report="$out/ncu_stalls"
"$ncu" --clock-control none --kernel-name "regex:$kernel_regex" --launch-skip "${SKIP:-2}" --launch-count 1 \
  --section WarpStateStats --section SourceCounters --import-source no -f -o "$report" "$@" > "$out/ncu_stalls.log" 2>&1
if [ ! -f "$report.ncu-rep" ]; then
  echo "ncu_stalls: no report (see $out/ncu_stalls.log):" >&2
  tail -5 "$out/ncu_stalls.log" >&2
  exit 1
fi
"$ncu" --import "$report.ncu-rep" --page raw --csv > "$out/ncu_stalls_raw.csv" 2>&1
"$ncu" --import "$report.ncu-rep" --page source --csv --print-source sass > "$out/ncu_stalls_sass.csv" 2>&1
python3 - "$out/ncu_stalls_raw.csv" "$out/ncu_stalls_sass.csv" "${TOP:-30}" "${HOT:-0}" <<'PY'
import csv, re, sys

def rows(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own messages are not CSV rows
    return list(csv.reader(lines))

def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None

raw = rows(sys.argv[1])
if len(raw) >= 2:
    header, values = raw[0], raw[-1]
    print("kernel:", values[header.index("Kernel Name")] if "Kernel Name" in header else "?")
    stalls = []
    for name, value in zip(header, values):
        if re.search(r"pcsamp_warps_issue_stalled_[a-z_]+$", name) and number(value):
            stalls.append((number(value), name.split("issue_stalled_")[1]))
    total = sum(v for v, _ in stalls) or 1.0
    print("warp samples by stall reason (all instructions):")
    for value, reason in sorted(stalls, reverse=True)[:14]:
        print(f"  {reason:28s} {value:12.0f}  {100.0 * value / total:5.1f}%")
else:
    print("no raw metrics; columns:", raw[0] if raw else "none")

sass = rows(sys.argv[2])
if len(sass) < 2:
    print("no per-instruction rows; see", sys.argv[2])
    sys.exit(0)
# the per-instruction table's header is the row that starts with "Address" (a "Kernel Name" row comes first)
starts = [i for i, r in enumerate(sass) if r and r[0] == "Address"]
if not starts:
    print("no per-instruction header; see", sys.argv[2])
    sys.exit(0)
header = sass[starts[0]]
body = [r for r in sass[starts[0] + 1:] if len(r) == len(header)]
sample_columns = [i for i, name in enumerate(header) if "Sampling" in name and "All" in name]
if not sample_columns:
    print("no 'Warp Stall Sampling (All Samples)' column; columns:", header)
    sys.exit(0)
samples_at = sample_columns[0]
source_at = header.index("Source") if "Source" in header else 1
reason_columns = [i for i, name in enumerate(header) if name.startswith("stall_") and "Not Issued" not in name]
total = sum(number(r[samples_at]) or 0.0 for r in body) or 1.0
print(f"top instructions by warp samples ({total:.0f} samples):")
for r in sorted(body, key=lambda r: number(r[samples_at]) or 0.0, reverse=True)[: int(sys.argv[3])]:
    samples = number(r[samples_at]) or 0.0
    reasons = sorted(((number(r[i]) or 0.0, header[i]) for i in reason_columns), reverse=True)[:3]
    detail = ", ".join(f"{name} {value:.0f}" for value, name in reasons if value > 0)
    print(f"  {100.0 * samples / total:5.1f}%  {r[0][-5:]:>5s}  {r[source_at][:64]:64s}  {detail.replace('stall_', '')}")
hot = float(sys.argv[4])
executed_at = header.index("Instructions Executed") if "Instructions Executed" in header else None
if hot > 0 and executed_at is not None:
    print(f"instructions executed at least {hot:.0f} times, in address order (executions, samples, top reasons):")
    for r in body:
        executed = number(r[executed_at]) or 0.0
        if executed < hot:
            continue
        samples = number(r[samples_at]) or 0.0
        reasons = sorted(((number(r[i]) or 0.0, header[i]) for i in reason_columns), reverse=True)[:2]
        detail = ", ".join(f"{name} {value:.0f}" for value, name in reasons if value > 0)
        print(f"  {r[0][-5:]:>5s} {executed:11.0f} {100.0 * samples / total:5.1f}%  {r[source_at][:64]:64s}  "
              f"{detail.replace('stall_', '')}")
PY
