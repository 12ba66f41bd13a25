#!/usr/bin/env bash
# Render a page in headless Chromium: a screenshot (PNG) and the page's DOM after its JavaScript ran.
# For `snakemake --report` (a single-page app: its captions exist only after its scripts ran) and for a
# table's own page (results/tables/<table>.html, what the report shows in a frame).
#   scripts/report-screenshot.sh page.html shot.png [dom.html]
# REPORT_WINDOW=W,H sets the window (default 1400,1100); a table's page is measured at the size of the
# report's frame (tests/test_report_page.py: Table 1's first accuracy on the first screen).
# Needs chromium-headless-shell or chromium (Debian; installed by scripts/system-packages.sh). Each run
# uses a fresh profile and reaches nothing on the network (no updates, no sync, no first-run pages).
set -euo pipefail
page=$(realpath "$1"); shot=$2; dom=${3:-}
browser=$(command -v chromium-headless-shell || command -v chromium || true)
[ -n "$browser" ] || { echo "report-screenshot: no headless chromium (apt-get install chromium-headless-shell)" >&2; exit 3; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update
       --disable-sync --no-first-run "--user-data-dir=$profile" --hide-scrollbars
       "--window-size=${REPORT_WINDOW:-1400,1100}" --virtual-time-budget=8000)
"$browser" "${flags[@]}" --screenshot="$shot" "file://$page" >/dev/null 2>&1
[ -s "$shot" ] || { echo "report-screenshot: $browser wrote no screenshot" >&2; exit 1; }
if [ -n "$dom" ]; then "$browser" "${flags[@]}" --dump-dom "file://$page" > "$dom" 2>/dev/null; fi
echo "report-screenshot: $shot${dom:+ and $dom}"
