"""podfilter.py, kube-router's relay to the API server: a list or watch of all pods asks for the real node's pods
only, everything else passes unchanged (bodies, headers, a watch's stream as it comes), and the relay ends with the
command it runs, with its exit status."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import pytest

from mpiplat.localcluster import podfilter, realnode


@pytest.mark.parametrize(("target", "want"), [
    ("/api/v1/pods?limit=500&resourceVersion=0",
     "/api/v1/pods?limit=500&resourceVersion=0&fieldSelector=spec.nodeName%3Dreal-0"),
    ("/api/v1/pods?watch=true&fieldSelector=status.phase%21%3DSucceeded",
     "/api/v1/pods?watch=true&fieldSelector=status.phase%21%3DSucceeded%2Cspec.nodeName%3Dreal-0"),
    ("/api/v1/pods", "/api/v1/pods?fieldSelector=spec.nodeName%3Dreal-0"),
    ("/api/v1/namespaces/team-a/pods?watch=true", "/api/v1/namespaces/team-a/pods?watch=true"),
    ("/apis/networking.k8s.io/v1/networkpolicies?watch=true", "/apis/networking.k8s.io/v1/networkpolicies?watch=true"),
    ("/api/v1/nodes/real-0", "/api/v1/nodes/real-0"),
])
def test_only_a_request_for_all_pods_gets_the_node_selector(target, want):
    assert podfilter.only_node(target, "real-0") == want


class _Upstream(http.server.BaseHTTPRequestHandler):
    """Answers a watch with two chunks a moment apart, anything else with its method, path and body."""

    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, bytes]] = []

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append((self.command, self.path, body))
        if "watch=true" in self.path:
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in (b'{"type":"ADDED"}\n', b'{"type":"DELETED"}\n'):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                time.sleep(0.2)
            self.wfile.write(b"0\r\n\r\n")
            return
        data = f"{self.command} {self.path} {body.decode()}".encode()
        self.send_response(201 if self.command == "POST" else 200)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Upstream", "yes")
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# The command the relay runs: what kube-router would ask, through the relay; it exits 3.
CLIENT = """
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
c.request("GET", "/api/v1/pods?watch=true")
r = c.getresponse()
print("watch", r.status, [r.read1(100) for _ in range(3)], flush=True)
c.request("POST", "/api/v1/namespaces/x/events", body=b'{"a":1}', headers={"Content-Type": "application/json"})
r = c.getresponse()
print("post", r.status, r.getheader("X-Upstream"), r.read(), flush=True)
sys.exit(3)
"""


def test_the_relay_passes_requests_and_streams_on_and_ends_with_its_command():
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    port = _free_port()
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-S", str(realnode.PODFILTER), f"--listen=127.0.0.1:{port}",
             f"--server=http://127.0.0.1:{upstream.server_address[1]}", "--node=real-0", "--",
             sys.executable, "-c", CLIENT, str(port)], capture_output=True, text=True, timeout=30)
    finally:
        upstream.shutdown()
    assert proc.returncode == 3, proc.stdout + proc.stderr
    watch, post = proc.stdout.splitlines()
    # Each event as the API server sent it, not all at the end.
    assert watch == "watch 200 [b'{\"type\":\"ADDED\"}\\n', b'{\"type\":\"DELETED\"}\\n', b'']", proc.stdout
    assert post == "post 201 yes b'POST /api/v1/namespaces/x/events {\"a\":1}'", proc.stdout
    paths = [(method, urllib.parse.unquote(path)) for method, path, _ in _Upstream.seen]
    assert paths == [("GET", "/api/v1/pods?watch=true&fieldSelector=spec.nodeName=real-0"),
                     ("POST", "/api/v1/namespaces/x/events")]


def test_https_needs_the_certificates():
    proc = subprocess.run([sys.executable, "-I", "-S", str(realnode.PODFILTER), "--listen=127.0.0.1:0",
                           "--server=https://10.244.0.1:32765", "--node=real-0", "--", "true"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "https needs --ca, --cert and --key" in proc.stderr, proc.stderr
