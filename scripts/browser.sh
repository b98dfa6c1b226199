# shellcheck shell=bash
# Finds (or installs) headless Chromium and its WebDriver for the console's
# browser tests. Sourced by scripts/test; not run on its own.
#
#   browser_install   exports IDEM_CHROMEDRIVER and IDEM_CHROMIUM when both are
#                     found, installing Debian's chromium and chromium-driver
#                     with apt-get when they are missing and we are root

browser_find() {
  local driver chromium
  driver=$(command -v chromedriver 2>/dev/null || true)
  chromium=$(command -v chromium 2>/dev/null || true)
  [ -n "$driver" ] && [ -n "$chromium" ] || return 1
  export IDEM_CHROMEDRIVER="$driver" IDEM_CHROMIUM="$chromium"
}

browser_install() {
  if browser_find; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "idem: chromium or chromedriver not found; installing them with apt-get" >&2
    local attempt
    for attempt in 1 2 3; do
      if apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq chromium chromium-driver >/dev/null; then
        break
      fi
      echo "idem: apt-get failed (attempt $attempt of 3)" >&2
      sleep 5
    done
    browser_find && return 0
  fi
  cat >&2 <<'MSG'
idem: the console's browser tests need chromium and chromedriver on PATH.
Install them, e.g. `sudo apt-get install chromium chromium-driver` (Debian).
MSG
  return 1
}
