#!/usr/bin/env bash
# Debian's headless Chromium and its WebDriver server, for the dashboard's browser tests
# (tests/tests/dashboard/, ADR 0010). Nothing else is downloaded: the tests drive
# /usr/bin/chromium through /usr/bin/chromedriver, both from Debian's packages.
#
#   eval "$(bash scripts/browser.sh install)"   # install what is missing, export the paths
#   bash scripts/browser.sh check               # exit 1 unless both are installed
#
# `install` prints only the exports on stdout (progress goes to stderr).
set -euo pipefail

CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver
# fonts-dejavu-core and fonts-liberation: the dashboard's text in screenshots on a bare machine.
PACKAGES=(chromium chromium-driver fonts-dejavu-core fonts-liberation)

log() { echo "browser.sh: $*" >&2; }

installed() {
  [[ -x $CHROMIUM && -x $CHROMEDRIVER ]] && dpkg -s fonts-dejavu-core fonts-liberation >/dev/null 2>&1
}

case ${1:-install} in
  install)
    if ! installed; then
      ((EUID == 0)) || { log "missing ${PACKAGES[*]} and not root: install them first"; exit 1; }
      log "installing: ${PACKAGES[*]}"
      export DEBIAN_FRONTEND=noninteractive
      # A fresh machine's package lists may be missing or stale: update once, then install.
      apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >&2 ||
        { apt-get update -qq >&2 && apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >&2; }
    fi
    log "$("$CHROMIUM" --version 2>/dev/null | head -1), $("$CHROMEDRIVER" --version | head -1)"
    echo "export SIMBA_CHROMIUM=$CHROMIUM SIMBA_CHROMEDRIVER=$CHROMEDRIVER"
    ;;
  check)
    installed
    ;;
  *)
    echo "usage: $0 install|check" >&2
    exit 2
    ;;
esac
