#!/usr/bin/env bash
# Render a `snakemake --report` page in a headless browser: a screenshot (PNG) and the page's text
# after its JavaScript ran (the report is a single-page app; its captions exist only then).
#   scripts/report-screenshot.sh report.html shot.png [dom.html]
# Needs chromium-headless-shell (Debian; installed by scripts/system-packages.sh).
set -euo pipefail
page=$(realpath "$1"); shot=$2; dom=${3:-}
browser=$(command -v chromium-headless-shell || command -v chromium || true)
[ -n "$browser" ] || { echo "report-screenshot: no headless chromium (apt-get install chromium-headless-shell)" >&2; exit 3; }
flags=(--no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1100 --virtual-time-budget=8000)
"$browser" "${flags[@]}" --screenshot="$shot" "file://$page" >/dev/null 2>&1
[ -s "$shot" ] || { echo "report-screenshot: $browser wrote no screenshot" >&2; exit 1; }
if [ -n "$dom" ]; then "$browser" "${flags[@]}" --dump-dom "file://$page" > "$dom" 2>/dev/null; fi
echo "report-screenshot: $shot${dom:+ and $dom}"
