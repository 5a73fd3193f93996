#!/usr/bin/env bash
# The coverage of the DML interval (src/analyze/regression.h) on simulated
# data with a known effect and a nonlinear confounder: 500 seeded
# repetitions at n = 600 (src/analyze/regression_test.cpp,
# Dml.CoversTheTruthWhereNaiveRegressionIsBiased, which asserts 93-97%);
# prints what the test measured, the naive estimates beside it.
#   benchmarks/dml_coverage.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/release/src/analyze/analyze_test
[ -x "$bin" ] || JOBS="${JOBS:-1}" bash scripts/build.sh release analyze_test >/dev/null
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$bin" --gtest_filter=Dml.CoversTheTruthWhereNaiveRegressionIsBiased --gtest_output="json:$out" >/dev/null
/usr/bin/python3 - "$out" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
t = j["testsuites"][0]["testsuite"][0]
print(("passed" if not t.get("failures") else "FAILED") + ": " + t["coverage"])
PY
