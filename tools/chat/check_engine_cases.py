#!/usr/bin/env python3
"""Check tests/chat/data/engine_cases.json against Jinja2 configured as transformers configures it.

Each case is {"name", "template", "context", "expected"} or {"name", "template", "context", "error": true}.
The C++ test (tests/chat/jinja_engine_test.cpp) renders the same cases with fathom's engine; this script keeps
the expectations honest. --fill writes Jinja2's output into cases that have neither "expected" nor "error".
Needs only the jinja2 package:  python3 tools/chat/check_engine_cases.py [--fill]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import REPO_ROOT, Jinja2Engine  # noqa: E402

CASES = os.path.join(REPO_ROOT, "tests", "chat", "data", "engine_cases.json")


def render(environment, case):
    return environment.from_string(case["template"]).render(**case.get("context", {}))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fill", action="store_true", help="record Jinja2's output for cases without expectations")
    parser.add_argument("--cases", default=CASES)
    args = parser.parse_args()
    with open(args.cases, encoding="utf-8") as handle:
        cases = json.load(handle)
    environment = Jinja2Engine().environment
    problems = filled = 0
    for case in cases:
        try:
            output, error = render(environment, case), None
        except Exception as exception:  # noqa: BLE001
            output, error = None, f"{type(exception).__name__}: {exception}"
        if "expected" not in case and "error" not in case:
            if not args.fill:
                print(f"{case['name']}: no expectation (run with --fill)")
                problems += 1
            elif error is not None:
                case["error"] = True
                filled += 1
                print(f"{case['name']}: filled error ({error})")
            else:
                case["expected"] = output
                filled += 1
            continue
        if case.get("error"):
            if error is None:
                print(f"{case['name']}: expected an error, Jinja2 rendered {output!r}")
                problems += 1
        elif error is not None:
            print(f"{case['name']}: Jinja2 raised {error}")
            problems += 1
        elif output != case["expected"]:
            print(f"{case['name']}: expected {case['expected']!r}, Jinja2 rendered {output!r}")
            problems += 1
    if filled:
        with open(args.cases, "w", encoding="utf-8") as handle:
            json.dump(cases, handle, ensure_ascii=False, indent=1)
            handle.write("\n")
    print(f"{len(cases)} cases, {problems} problems, {filled} filled")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
