#!/usr/bin/env bash
# The main job: set up (.venv with the CPU torch first, then hypviz[lab]: everything the notebooks
# import, the documentation tools and JupyterLab), build the documentation site from the notebooks'
# committed outputs into build/html/ (Sphinx + MyST-NB, offline; the test command's nbval run checks
# those outputs), and write the demo attention report to build/demo/.
#   bash scripts/run.sh
# It talks: a line per step with the time since the start, and a "still ..." line every 10 s while a long step (the installs, the site build) runs.  It is incremental: the installs are
# skipped when a stamp of constraints.txt, pyproject.toml, the torch pin and the extras matches the
# one written after the last successful install (in the venv), and scripts/site.py keeps a site
# whose inputs are unchanged ("unchanged, kept"); the test command's site tests read that build/html
# instead of building their own while its stamp matches the sources (CI runs this script just before).  HYPVIZ_REINSTALL=1 forces the installs;
# HYPVIZ_TICK sets the seconds between the "still ..." lines (default 10: at least one line in 30 s even when a busy machine delays the ticker).
# A SIGINT (Ctrl-C), SIGTERM or SIGHUP stops it at once: the running step's processes get a SIGTERM (scripts/site.py
# then removes its temporary folder and keeps the old site), and the job exits with 128 + the signal's number (130, 143, 129).
set -euo pipefail
# job control: each step runs in its own process group (so that one kill reaches all of a step's processes, and a
# signal is not ignored by them as it is by a script's background commands); the script waits for it with the wait
# builtin, which a trapped signal interrupts at once (a foreground command would run on to its end first)
set -m
cd "$(dirname "$0")/.."
venv="${HYPVIZ_VENV:-.venv}"
extras=lab
start=$SECONDS
ticker=""
tick="${HYPVIZ_TICK:-10}"

say() { printf 'hypviz [%3ds] %s\n' "$((SECONDS - start))" "$*"; }
# a background "still <what>" line every $tick s until stop_ticker; it ends with this script
start_ticker() {
    local what="$1" began=$SECONDS
    # (sleep in the background and wait for it: a TERM interrupts the wait at once; sleep holds no
    # copy of stdout, so a pipe reading this script's output closes when the script ends)
    ( trap 'kill "$nap" 2>/dev/null; exit 0' TERM
      while :; do
          sleep "$tick" </dev/null >/dev/null 2>&1 & nap=$!
          wait "$nap"
          printf 'hypviz [%3ds] ... still %s (%ds so far)\n' "$((SECONDS - start))" "$what" "$((SECONDS - began))"
      done ) &
    ticker=$!
}
stop_ticker() {
    if [ -n "$ticker" ]; then kill "$ticker" 2>/dev/null || true; wait "$ticker" 2>/dev/null || true; ticker=""; fi
}
trap stop_ticker EXIT

step=""  # the process group of the running step
# run a step ("$@") in its own process group and wait for it; its exit status is the step's (its input is
# /dev/null: a background group that reads the terminal would be stopped)
run_step() {
    "$@" </dev/null &
    step=$!
    local status=0
    wait "$step" || status=$?
    step=""
    return "$status"
}
on_signal() {
    local name="$1" code="$2"
    trap '' INT TERM HUP
    if [ -n "$step" ]; then
        kill -TERM -- "-$step" 2>/dev/null || true
        wait "$step" 2>/dev/null || true
    fi
    stop_ticker
    say "stopped by SIG${name} (exit status ${code})" >&2
    exit "$code"
}
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

# the stamp of what the installs depend on (the pinned versions, the package's metadata and extras,
# the torch pin, the Python that runs the venv)
install_stamp() {
    {
        echo "extras=${extras}"
        grep -E '^torch==' constraints.txt || true
        sha256sum constraints.txt pyproject.toml
        if [ -x "$venv/bin/python" ]; then "$venv/bin/python" -c 'import sys; print(sys.version)'; fi
    } | sha256sum | cut -d' ' -f1
}
stamp_file="$venv/.hypviz-install-stamp"

say "step 1/3: set-up of ${venv} (hypviz[${extras}] with constraints.txt)"
if [ "${HYPVIZ_REINSTALL:-0}" != 1 ] && [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$(install_stamp)" ] \
        && "$venv/bin/python" -c 'import hypviz, sphinx, myst_nb' 2>/dev/null; then
    say "set-up unchanged (constraints.txt, pyproject.toml and the torch pin match the last install): installs skipped"
else
    rm -f "$stamp_file"
    start_ticker "installing (pip prints nothing until it is done)"
    run_step bash scripts/setup.sh "$extras"
    stop_ticker
    install_stamp > "$stamp_file"
    say "set-up done"
fi

export MPLBACKEND=Agg PYTHONHASHSEED=0
say "step 2/3: the documentation site -> build/html (kept when none of its inputs changed)"
start_ticker "building the site (English, then Chinese)"
run_step "$venv/bin/python" scripts/site.py --out build/html
stop_ticker
say "step 3/3: the demo attention report -> build/demo"
start_ticker "writing the demo report"
run_step "$venv/bin/hypviz" demo --out build/demo --force --no-progress
stop_ticker
say "done"
echo "hypviz: open build/html/index.html (the notebooks, API and CLI reference) and build/demo/report.html (an attention report)"
echo "hypviz: re-execute the notebooks after changing the package: $venv/bin/python scripts/notebooks.py execute"
echo "hypviz: for interactive use: $venv/bin/jupyter lab notebooks/"
