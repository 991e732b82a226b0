"""mpiplat.kube helpers that need no cluster."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from mpiplat.kube import wait_gone


def _reads(*answers):
    """A read that answers each of `answers` in turn: an object, or an ApiException status to raise."""
    left = list(answers)

    def read():
        answer = left.pop(0)
        if isinstance(answer, int):
            raise ApiException(status=answer)
        return answer
    return read


def test_wait_gone_returns_once_the_api_answers_404(monkeypatch):
    monkeypatch.setattr("mpiplat.kube.time.sleep", lambda s: None)
    read = _reads({"kind": "x"}, {"kind": "x"}, 404)
    wait_gone(read, 60, "CRD x")


def test_wait_gone_raises_other_api_errors_and_names_what_stayed(monkeypatch):
    monkeypatch.setattr("mpiplat.kube.time.sleep", lambda s: None)
    with pytest.raises(ApiException):
        wait_gone(_reads(403), 60, "CRD x")
    with pytest.raises(TimeoutError, match="CRD x still there 0s after its deletion"):
        wait_gone(lambda: {"kind": "x"}, 0, "CRD x")
