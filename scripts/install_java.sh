#!/usr/bin/env bash
# Make sure a Java runtime >= 17 is on PATH (PySpark 4, used by pipeline/ and its tests, needs one).
# Does nothing, quickly, when `java -version` already reports 17 or newer; otherwise installs
# Debian's openjdk-17-jre-headless (default-jre-headless where the release has no 17) with apt-get.
# Idempotent; needs root (or sudo) only when it has something to install.
set -euo pipefail

java_major() {
    # `openjdk version "17.0.15" 2025-04-15` -> 17; `java version "1.8.0_292"` -> 8.
    java -version 2>&1 | awk -F'"' '/version/ { print $2; exit }' |
        awk -F. '{ if ($1 == "1") print $2; else print $1 }'
}

if command -v java >/dev/null 2>&1; then
    major="$(java_major || true)"
    if [[ "$major" =~ ^[0-9]+$ ]] && [ "$major" -ge 17 ]; then
        exit 0
    fi
    echo "java ${major:-?} is older than 17: installing openjdk-17-jre-headless" >&2
else
    echo "no java on PATH: installing openjdk-17-jre-headless (PySpark needs Java >= 17)" >&2
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install a Java runtime >= 17 yourself (no apt-get here), then run this again" >&2
    exit 1
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "installing Java needs root" >&2; exit 1; }
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
if ! $SUDO apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless; then
    $SUDO apt-get install -y -qq --no-install-recommends default-jre-headless
fi
major="$(java_major || true)"
if ! [[ "$major" =~ ^[0-9]+$ ]] || [ "$major" -lt 17 ]; then
    echo "installed Java is ${major:-missing}; PySpark needs >= 17" >&2
    exit 1
fi
