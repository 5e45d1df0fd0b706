#!/usr/bin/env bash
# Every test of coffer, with the servers the tests need: the README's test command.
#
#   bash .ci/test.sh [CARGO TEST ARGUMENTS...]
#
# Installs the pinned test servers (.ci/services.sh install: the Versity S3 gateway,
# toxiproxy, OpenSSH's sshd, the restic, borg and kopia binaries that import tests read, and
# mailpit, the SMTP server of the agent's notification tests, and Debian's Chromium with
# ChromeDriver and Firefox ESR with geckodriver for the web interface's browser tests; once,
# then cached), starts them on
# 127.0.0.1, checks that
# they work, runs `cargo test --workspace --locked --no-fail-fast` with their variables
# (docs/testing.md), and stops them however it ends (their logs are kept when a test
# failed, and so are the browser test's screenshots, in target/ui-screenshots). Arguments
# are passed on to cargo test (e.g. `-p coffer --test serve`).
#
# COFFER_TEST_SKIP=GROUP[,GROUP...] skips groups of tests by name (s3, sftp, toxiproxy, restic, borg, kopia, smtp,
# browser, firefox):
# their servers are neither installed nor started, their tests pass with a notice, and
# the summary at the end says how many were skipped. Without it, a test whose server is
# missing fails with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."

services=$PWD/.ci/services.sh
t0=$SECONDS
bash "$services" install
echo "test servers installed in $((SECONDS - t0))s"

COFFER_CI_RUN=$(mktemp -d "${TMPDIR:-/tmp}/coffer-test.XXXXXX")
export COFFER_CI_RUN
target_dir=${CARGO_TARGET_DIR:-target}
[[ $target_dir == /* ]] || target_dir=$PWD/$target_dir
export COFFER_UI_SCREENSHOTS=${COFFER_UI_SCREENSHOTS:-$target_dir/ui-screenshots}
rm -rf "$COFFER_UI_SCREENSHOTS"
export COFFER_TEST_SKIP_LOG=$COFFER_CI_RUN/skipped
# Stop the servers however this script ends; keep their logs when it failed.
stop_services() {
    local status=$?
    bash "$services" stop || true
    if [[ $status == 0 ]]; then
        rm -rf "$COFFER_CI_RUN" "$COFFER_UI_SCREENSHOTS"
    else
        echo "test server logs kept in $COFFER_CI_RUN" >&2
        if [[ -d $COFFER_UI_SCREENSHOTS ]]; then
            echo "the browser test's screenshots are in $COFFER_UI_SCREENSHOTS" >&2
        fi
    fi
}
trap stop_services EXIT
# Without these, a signal would end the script without running the EXIT trap.
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

t0=$SECONDS
bash "$services" start
bash "$services" selftest
echo "test servers started and checked in $((SECONDS - t0))s"
# The env file holds export lines: the tests read COFFER_TEST_S3_*, COFFER_TEST_TOXIPROXY*
# and COFFER_TEST_SFTP_* from the environment.
# shellcheck source=/dev/null
. "$COFFER_CI_RUN/env"

status=0
cargo test --workspace --locked --no-fail-fast "$@" || status=$?

echo "== skipped by name"
if [[ -s $COFFER_TEST_SKIP_LOG ]]; then
    echo "COFFER_TEST_SKIP=${COFFER_TEST_SKIP:-}: these tests did not run:"
    cut -d' ' -f1 "$COFFER_TEST_SKIP_LOG" | sed 's/:$//' | sort | uniq -c | while read -r n group; do
        echo "  $group: $n tests"
    done
else
    echo "no group of tests was skipped"
fi
exit "$status"
