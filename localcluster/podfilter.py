"""Run kube-router behind a relay to the API server that shows it only the real node's pods.

    python -I -S podfilter.py --listen 127.0.0.1:PORT --server URL --ca FILE --cert FILE --key FILE \\
        --node NAME -- kube-router --kubeconfig=FILE ...

The relay listens on PORT before it starts the command (its kubeconfig names http://127.0.0.1:PORT), passes each
request on to URL (over TLS with the client certificate), and adds `spec.nodeName=NAME` to the field selector of a
list or watch of all pods. It ends with the command, with its exit status; SIGTERM and SIGINT go to the command.

Why: kube-router (1.6) rebuilds its whole firewall (iptables-save and -restore, ipset, a score of iptables
processes: about 70 ms of CPU) after any change of any pod of the cluster. KWOK's simulated pods change all the
time, four rebuilds each (under the scale rows kube-router took a quarter of the machine's CPU), and their IPs
never carry a packet. What kube-router enforces does not change: its rules act on the real node's pods, and the
peers of its policies that send packets are pods of the real node too.

It listens on the node's loopback only: its requests carry the admin's certificate, and pods cannot reach it.
Standard library only, run by path, like supervise.py.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import signal
import ssl
import subprocess
import sys
import threading
import urllib.parse

ALL_PODS = "/api/v1/pods"
# Hop-by-hop headers (RFC 9110 7.6.1) and the framing the relay sets itself.
NOT_RELAYED = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
               "host", "content-length"}


def only_node(target: str, node: str) -> str:
    """A request target (path and query), with `spec.nodeName=node` added to its field selector when it asks for
    all pods."""
    url = urllib.parse.urlsplit(target)
    if url.path.rstrip("/") != ALL_PODS:
        return target
    query = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
    fields = [v for k, v in query if k == "fieldSelector" and v]
    query = [(k, v) for k, v in query if k != "fieldSelector"]
    query.append(("fieldSelector", ",".join([*fields, f"spec.nodeName={node}"])))
    return urllib.parse.urlunsplit(("", "", url.path, urllib.parse.urlencode(query), ""))


class Relay(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; a watch is relayed chunk by chunk as it comes

    def relay(self) -> None:
        srv: Server = self.server  # type: ignore[assignment]
        size = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(size) if size else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in NOT_RELAYED}
        upstream = (http.client.HTTPSConnection(srv.upstream.hostname, srv.upstream.port, context=srv.tls)
                    if srv.tls else http.client.HTTPConnection(srv.upstream.hostname, srv.upstream.port))
        answered = False
        try:
            upstream.request(self.command, only_node(self.path, srv.node), body=body, headers=headers)
            resp = upstream.getresponse()
            self.send_response_only(resp.status, resp.reason)
            answered = True
            for key, val in resp.getheaders():
                if key.lower() not in NOT_RELAYED:
                    self.send_header(key, val)
            if self.command == "HEAD" or resp.status in (204, 304) or resp.status < 200:
                self.end_headers()
            elif resp.getheader("Content-Length") is not None:
                data = resp.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while chunk := resp.read1(65536):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.write(b"0\r\n\r\n")
        except (OSError, http.client.HTTPException) as err:  # the API server restarted, or the client left
            self.close_connection = True
            if not answered:
                self.send_error(502, f"the API server at {srv.upstream.netloc}: {err}")
        finally:
            upstream.close()

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = relay

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (BaseHTTPRequestHandler's name)
        pass  # not one line a request; errors show in kube-router's own log


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    upstream: urllib.parse.SplitResult
    tls: ssl.SSLContext | None
    node: str


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="podfilter.py")
    parser.add_argument("--listen", required=True, help="HOST:PORT to listen on, plain HTTP")
    parser.add_argument("--server", required=True, help="the API server's URL, https://HOST:PORT (or http://)")
    parser.add_argument("--ca", help="the CA file that signed the API server's certificate (https)")
    parser.add_argument("--cert", help="the client certificate file (https)")
    parser.add_argument("--key", help="its key file (https)")
    parser.add_argument("--node", required=True, help="the node whose pods a list or watch of all pods returns")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = Server((host, int(port)), Relay)
    server.upstream = urllib.parse.urlsplit(args.server)
    server.tls = None
    if server.upstream.scheme == "https":
        if not (args.ca and args.cert and args.key):
            parser.error(f"--server {args.server}: https needs --ca, --cert and --key")
        server.tls = ssl.create_default_context(cafile=args.ca)
        server.tls.load_cert_chain(args.cert, args.key)
    server.node = args.node
    threading.Thread(target=server.serve_forever, daemon=True).start()
    child = subprocess.Popen(args.command)
    signal.signal(signal.SIGTERM, lambda signum, _frame: child.send_signal(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
