"""Which proxy a request goes through, resolved from the environment as curl, requests
and the openai SDK resolve it: HTTPS_PROXY for https:// endpoints, HTTP_PROXY for
http:// ones (ALL_PROXY for either; lower-case names first), NO_PROXY for hosts and
domains that go direct (urllib.request.getproxies and proxy_bypass). A loopback
endpoint (127.0.0.0/8, ::1, localhost) never goes through a proxy: a local server is
on this machine, whatever the environment says. Credentials in the proxy's URL
(`http://user:password@proxy:3128`) are sent to the proxy only (aiohttp)."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass


def is_loopback(host: str) -> bool:
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def proxy_for(url: str) -> str | None:
    """The URL of the proxy a request to `url` goes through, or None to go direct. A
    proxy given without a scheme is an http:// one, as curl reads it."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not host or is_loopback(host):
        return None
    if proxy_bypass(f"{host}:{parts.port}" if parts.port else host):
        return None
    proxies = getproxies()
    chosen = proxies.get(parts.scheme) or proxies.get("all")
    if not chosen:
        return None
    return chosen if "://" in chosen else f"http://{chosen}"
