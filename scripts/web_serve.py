#!/usr/bin/env python3
"""Serves the browser build (build-web/) on 127.0.0.1 with the two headers that make a page
cross-origin isolated (Cross-Origin-Opener-Policy and Cross-Origin-Embedder-Policy): without
them a browser gives the page no SharedArrayBuffer, and kvscope's engine threads (Web Workers
sharing the module's memory) cannot start. Used by scripts/web.sh --serve and the browser test.

--model PATH serves one model file beside the page, at models/NAME, and prints the URL that
loads it (index.html?model=models/NAME): the page fetches it before it starts.
"""
import argparse
import functools
import http.server
import os
import sys


class IsolatedHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
        ".data": "application/octet-stream",
    }

    files = {}  # URL path -> a file outside the root (make_server's `files`)
    isolated = True  # send the two headers (make_server's `isolated`)

    def translate_path(self, path):
        mapped = self.files.get(path.split("?", 1)[0])
        return mapped if mapped else super().translate_path(path)

    def end_headers(self):
        if self.isolated:
            self.send_header("Cross-Origin-Opener-Policy", "same-origin")
            self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cache-Control", "no-cache")
        super().end_headers()

    def log_message(self, fmt, *args):
        if self.server.verbose:
            super().log_message(fmt, *args)


def make_server(root, port, verbose=False, files=None, isolated=True):
    """A server for `root` on 127.0.0.1:`port` (0: any free port), with `files` (URL path ->
    file) served beside it; not yet serving. isolated=False leaves the two headers out, as a
    plain static host does (the page's service worker, app/web/isolate.js, then adds them)."""
    handler_class = type("Handler", (IsolatedHandler,),
                         {"files": dict(files or {}), "isolated": isolated})
    handler = functools.partial(handler_class, directory=root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.verbose = verbose
    return server


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", help="the folder to serve (build-web)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--model", help="a model file to serve beside the page (models/NAME)")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.root, "index.html")):
        print(f"web_serve.py: {args.root}/index.html: not found (run scripts/web.sh first)",
              file=sys.stderr)
        return 2
    files = {}
    if args.model:
        if not os.path.isfile(args.model):
            print(f"web_serve.py: --model {args.model}: not a file", file=sys.stderr)
            return 2
        files["/models/" + os.path.basename(args.model)] = os.path.abspath(args.model)
    try:
        server = make_server(args.root, args.port, verbose=True, files=files)
    except OSError as e:
        print(f"web_serve.py: 127.0.0.1:{args.port}: {e.strerror}", file=sys.stderr)
        return 2
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    print(f"kvscope: open {url} (Ctrl+C stops)", flush=True)
    for path in files:
        print(f"kvscope: with {path[len('/models/'):]}: {url}index.html?model={path[1:]}",
              flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
