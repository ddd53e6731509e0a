#!/bin/sh
# Nightly stress campaign, callable from cron or CI:
#
#   STRESS_HOME=/srv/tpusim-stress scripts/nightly_stress.sh
#
# Runs the campaign of the day (root seed = the UTC date YYYYMMDD, or $STRESS_DATE) into the fixed
# database $STRESS_HOME/stress.db (default: <repo>/stress_runs/nightly), bundles under
# $STRESS_HOME/bundles. Re-running the same day resumes that campaign. The report goes to
# $STRESS_HOME/report-<date>.txt (and report-latest.txt), the progress log to run-<date>.log.
# The programs run as Dask tasks: on a local cluster of JOBS worker processes (127.0.0.1 only), or,
# with SCHEDULER=tls://HOST:PORT (or tcp://), on that Dask cluster (dask scheduler + dask worker,
# dask-jobqueue, Kubernetes), with TLS_CA_FILE / TLS_CERT / TLS_KEY for a tls:// address (see
# docs/stress_dask.md). Two runs on the same day at once split the work.
# Settings: N (programs, default 1000), HW (default small), JOBS (default 2), INVALID_RATE (share of
# invalid programs that must be refused and flagged alike by both sides, default 0.2: the error
# checkers have about 25 paths, and at stressgen's own 0.05 a checker mutant survived 60
# programs), BUG (inject
# an RTL bug, for checking the flow), STRESS_ARGS (extra `stressgen run` options), PY (python).
# Exit code = the campaign verdict: 0 every program passed and every coverage bin was hit,
# 1 a failure or an empty bin, 2 a usage error, 130 interrupted.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 2
PY=${PY:-$REPO/.venv/bin/python}
STRESS_HOME=${STRESS_HOME:-$REPO/stress_runs/nightly}
DATE=${STRESS_DATE:-$(date -u +%Y%m%d)}
mkdir -p "$STRESS_HOME" || exit 2
REPORT="$STRESS_HOME/report-$DATE.txt"
set -- run --seed "$DATE" --count "${N:-1000}" --hw "${HW:-small}" \
    --db "$STRESS_HOME/stress.db" --bundles "$STRESS_HOME/bundles" --quiet
if [ -n "${SCHEDULER:-}" ]; then
    set -- "$@" --scheduler "$SCHEDULER"
    [ -n "${TLS_CA_FILE:-}" ] && set -- "$@" --tls-ca-file "$TLS_CA_FILE"
    [ -n "${TLS_CERT:-}" ] && set -- "$@" --tls-cert "$TLS_CERT"
    [ -n "${TLS_KEY:-}" ] && set -- "$@" --tls-key "$TLS_KEY"
else
    set -- "$@" --jobs "${JOBS:-2}"
fi
set -- "$@" --invalid-rate "${INVALID_RATE:-0.2}"
[ -n "${BUG:-}" ] && set -- "$@" --bug "$BUG"
LOG="$STRESS_HOME/run-$DATE.log"
echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) stressgen $* ${STRESS_ARGS:-}" >>"$LOG"
# Ctrl-C reaches stressgen too (same process group): it records what is done and exits 130;
# the trap keeps this shell alive until then and removes the partial report
trap 'interrupted=1' INT TERM
interrupted=0
# shellcheck disable=SC2086  # STRESS_ARGS is a list of options
"$PY" -m stressgen "$@" ${STRESS_ARGS:-} >"$REPORT.tmp" 2>>"$LOG"
rc=$?
[ "$interrupted" = 1 ] && [ "$rc" -le 1 ] && rc=130
if [ "$rc" -le 1 ]; then            # a verdict (0 pass, 1 fail): publish the report
    mv "$REPORT.tmp" "$REPORT"
    cp "$REPORT" "$STRESS_HOME/report-latest.txt"
    echo "stress $DATE: exit $rc; report $REPORT"
else                                # usage error or interrupted: no report, see the log
    rm -f "$REPORT.tmp"
    echo "stress $DATE: exit $rc; no report, see $LOG:" >&2
    sed -n '/^=== /h; /^=== /!H; ${x;p;}' "$LOG" | tail -n +2 | tail -n 3 >&2   # this run's last lines
fi
exit $rc
