#!/usr/bin/env bash
# Installs the system packages the build needs, only when they are missing: libjpeg-turbo
# (bundled in turbojpeg-sys) builds with cmake and its SIMD code with nasm.
# With --browser, also what the report test needs: it renders report.html in headless Chromium
# (Debian's chromium package; Playwright drives it, its own browser download is not used) with
# fonts to draw the page's text.
set -euo pipefail
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v nasm >/dev/null || missing+=(nasm)
browser=()
if [ "${1:-}" = "--browser" ]; then
    [ -x /usr/bin/chromium ] || browser+=(chromium)
    fc-list 2>/dev/null | grep -qi -e dejavu -e liberation || browser+=(fonts-dejavu-core fonts-liberation)
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
if ((${#missing[@]} + ${#browser[@]})); then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing ${missing[*]} ${browser[*]}"
    $sudo apt-get update -qq
    if ((${#missing[@]})); then
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    if ((${#browser[@]})); then
        # Without recommends: a headless browser needs none of the desktop packages they pull in.
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
            "${browser[@]}" >/dev/null
    fi
fi
