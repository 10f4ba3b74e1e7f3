"""URLs as they may be shown: without the credentials a URL can carry
(``https://user:token@host/x.git``, or a token alone as the user name). A git source's URL is
given with them on the command line; every description, log line, error, page and file the
daemon or another command writes shows it through these."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

# scheme://userinfo@ anywhere in a text (userinfo: up to the last @ before a /, space or quote)
_USERINFO = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^/\s'\"<>]+@")


def without_credentials(url: str) -> str:
    """``https://user:token@host/x.git`` -> ``https://host/x.git`` (other URLs as they are)."""
    parts = urlsplit(url)
    if not parts.scheme or "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def hide_credentials(text: str) -> str:
    """``text`` with the user information of every URL in it left out (``git
    https://host/x.git branch main``, a command line, a tool's error message)."""
    return _USERINFO.sub(r"\1", text) if "@" in text else text
