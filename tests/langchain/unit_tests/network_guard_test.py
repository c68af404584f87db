"""The LangChain tests run offline: the autouse guard refuses IP connections and DNS."""

from __future__ import annotations

import socket

import pytest


def test_ip_connections_are_refused():
    with pytest.raises(Exception, match=r"connect|blocked|disabled"):
        socket.create_connection(("192.0.2.1", 443), timeout=1)


def test_name_resolution_is_refused():
    with pytest.raises(OSError, match="network disabled"):
        socket.getaddrinfo("api.openai.com", 443)
