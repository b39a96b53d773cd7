#!/usr/bin/env bash
# The newest-versions lane: the tests most exposed to upstream drift (verifiers, TRL, inspect, OpenEnv,
# gymnasium, Jupyter kernels, the fork server) against the newest versions pyproject.toml allows, with no lock,
# in a venv of their own; the Jupyter stack (JUPYTER below, bounded at the versions tested because
# themisto_env/sandbox/compat/ uses its private names) at its newest, past those bounds. It says which bound
# it ran past and what failed, and never fails itself: the locked run (requirements/lock.txt) is what gates
# CI; a failure here is drift to look at (then refresh the lock with scripts/lock.sh, or bound the
# dependency), before a user meets it. A bound passed with nothing failed may be lifted (to below the next
# minor of the version run here); with failures, sandbox/compat/ needs the newer version's names first.
#
#   bash scripts/newest-versions.sh          prints "newest-versions lane: N failed ..." and exits 0
#
# Environment: THEMISTO_NEWEST_DIR (default ${TMPDIR:-/tmp}/themisto-newest-versions): the venv, and
# junit.xml, pytest.log and summary.txt, the lane's results. torch stays at the lock's CPU build (the newest
# torch on the index is the CUDA build, gigabytes); ray is left out (slow to install, not in the subset).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${THEMISTO_NEWEST_DIR:-${TMPDIR:-/tmp}/themisto-newest-versions}"
python="${PYTHON:-python3}"
started=$(date +%s)
tests=(
  tests/bridges/test_vf_env.py
  tests/bridges/rl/test_tool_env.py tests/bridges/rl/test_rewards.py tests/bridges/rl/test_export.py
  tests/bridges/test_inspect.py
  tests/bridges/openenv/test_server.py
  tests/env/test_env.py
  tests/data/test_notebook.py tests/data/test_recorder.py tests/sandbox/test_kernel.py
  tests/sandbox/test_program_sources.py tests/sandbox/test_template.py tests/sandbox/test_template_spares.py
)
# bounded at the versions tested (pyproject.toml): installed here at their newest, ignoring those bounds
JUPYTER=(ipykernel ipython traitlets jupyter_client jupyter_core pyzmq)

summary() {  # the banner, also written to summary.txt
  echo "==> newest-versions lane: $1 ($(( $(date +%s) - started )) s; informational, does not gate CI; results in $out)" \
    | tee "$out/summary.txt"
}

rm -rf "$out"
mkdir -p "$out"
torch="$(sed -n 's/^torch==//p' requirements/lock.txt)"
if ! { "$python" -m venv "$out/venv" \
       && "$out/venv/bin/python" -m pip install -q --disable-pip-version-check "torch==${torch:-2.13.0}" \
       && "$out/venv/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev,rl]'; } >"$out/install.log" 2>&1; then
  tail -n 20 "$out/install.log"
  summary "install failed (see install.log)"
  exit 0
fi
# past the bounds: pip installs what is asked and only warns that themisto-env asked for less
"$out/venv/bin/python" -m pip install -q --disable-pip-version-check -U "${JUPYTER[@]}" >>"$out/install.log" 2>&1
passed="$("$out/venv/bin/python" scripts/bounds_passed.py "${JUPYTER[@]}" | tee "$out/bounds.txt")"
echo "==> newest-versions lane: the Jupyter stack's bounds: $(echo "$passed" | paste -sd ';' -)"
"$out/venv/bin/python" -m pip freeze --exclude-editable | sed -E 's/^(torch==[^+]+)\+.*/\1/' >"$out/versions.txt"
# what differs from the lock: the drift this lane runs against
newer="$(grep -vxFf <(grep -v '^#' requirements/lock.txt) "$out/versions.txt" | tr '\n' ' ')"
echo "==> newest-versions lane: versions other than the lock's: ${newer:-none}"

# -m: no docker, bwrap, Ray or training (minutes each); the kernels run on the local backend
PATH="$out/venv/bin:$PATH" timeout 900 "$out/venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 \
  -m "not docker and not bwrap and not environments and not ray and not training" \
  --junitxml="$out/junit.xml" "${tests[@]}" >"$out/pytest.log" 2>&1
status=$?
tail -n 15 "$out/pytest.log"
counts="$("$out/venv/bin/python" - "$out/junit.xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET

try:
    root = ET.parse(sys.argv[1]).getroot()
except (OSError, ET.ParseError):
    print("no results")
    raise SystemExit
suites = [root] if root.tag == "testsuite" else list(root)
total = sum(int(s.get("tests", 0)) for s in suites)
failed = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
print(f"{failed} failed of {total} tests ({skipped} skipped)")
EOF
)"
[ "$status" -eq 124 ] && counts="timed out after 900 s; $counts"
if grep -q " is past " "$out/bounds.txt"; then
  case "$counts" in
    "0 failed"*) counts="$counts; bounds passed and the suite holds: they may be lifted ($(paste -sd ';' "$out/bounds.txt"))" ;;
    *) counts="$counts; bounds passed and tests fail: keep them ($(paste -sd ';' "$out/bounds.txt"))" ;;
  esac
fi
summary "$counts"
exit 0
