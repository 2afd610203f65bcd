"""Scraping the broker's /metrics endpoint: Prometheus text parsed into {series: value}."""

from __future__ import annotations

import re
import urllib.error
import urllib.request


SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (\S+)$')


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) [a-z_]+ ", line), line
            continue
        match = SAMPLE.match(line)
        assert match, line
        samples[match.group(1) + (match.group(2) or "")] = float(match.group(3))
    return samples
